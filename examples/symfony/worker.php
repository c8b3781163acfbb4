<?php
// worker.php: a Symfony Messenger worker on the Redis transport, consuming
// what binlog-outbox relays with --format symfony-messenger.
//
// A Symfony application gets all of this from the framework bundle and
// `bin/console messenger:consume outbox` (docs/symfony.md); this script
// wires the same components by hand on Debian's Symfony 5.4 or 6.4 packages
// (php-symfony-messenger, php-symfony-redis-messenger,
// php-symfony-serializer, php-symfony-property-access), so that the test
// suite runs a real Worker without an application:
//
//   - the Redis transport (RedisTransportFactory) on the DSN
//     redis://host:port/<stream>/<group>/<consumer>;
//   - Messenger's Serializer over the Symfony Serializer (JSON, with the
//     camel_case_to_snake_case name converter);
//   - InboxMiddleware (exactly-once effects) before the handlers;
//   - retries (MultiplierRetryStrategy) and a failure transport on a second
//     Redis stream;
//   - a clean stop on SIGTERM between two messages.
//
//   php examples/symfony/worker.php --transport-dsn redis://127.0.0.1:6379/messages/symfony/worker-1 \
//       --dsn 'mysql:host=127.0.0.1;port=3306;dbname=app' --user app --password app
//
// Output, one line per message: "handled message_id=... event_type=...
// attempt=N" or "duplicate message_id=..."; retries and failures go to
// stderr.

declare(strict_types=1);

require_once 'Symfony/Component/Messenger/autoload.php';
// Debian's Symfony 6.4 packages the Redis transport with an autoloader of
// its own, which Messenger's no longer loads (5.4's did).
require_once 'Symfony/Component/Messenger/Bridge/Redis/autoload.php';
require_once 'Symfony/Component/Serializer/autoload.php';
require_once 'Symfony/Component/PropertyAccess/autoload.php';
require_once 'Symfony/Component/EventDispatcher/autoload.php';
require_once 'Psr/Container/autoload.php';
require_once __DIR__ . '/../php/common.php';

spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'App\\')) {
        $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, 4)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

use App\Message\OrderCancelled;
use App\Message\OrderPaid;
use App\Message\OrderPlaced;
use App\MessageHandler\OrderHandler;
use App\Messenger\InboxMiddleware;
use App\Messenger\Locator;
use Psr\Log\AbstractLogger;
use Symfony\Component\EventDispatcher\EventDispatcher;
use Symfony\Component\Messenger\Bridge\Redis\Transport\RedisTransportFactory;
use Symfony\Component\Messenger\EventListener\DispatchPcntlSignalListener;
use Symfony\Component\Messenger\EventListener\SendFailedMessageForRetryListener;
use Symfony\Component\Messenger\EventListener\SendFailedMessageToFailureTransportListener;
use Symfony\Component\Messenger\EventListener\StopWorkerOnSigtermSignalListener;
use Symfony\Component\Messenger\EventListener\StopWorkerOnTimeLimitListener;
use Symfony\Component\Messenger\Handler\HandlersLocator;
use Symfony\Component\Messenger\MessageBus;
use Symfony\Component\Messenger\Middleware\HandleMessageMiddleware;
use Symfony\Component\Messenger\Retry\MultiplierRetryStrategy;
use Symfony\Component\Messenger\Transport\Serialization\Serializer;
use Symfony\Component\Messenger\Worker;
use Symfony\Component\Serializer\Encoder\JsonEncoder;
use Symfony\Component\Serializer\NameConverter\CamelCaseToSnakeCaseNameConverter;
use Symfony\Component\Serializer\Normalizer\ArrayDenormalizer;
use Symfony\Component\Serializer\Normalizer\DateTimeNormalizer;
use Symfony\Component\Serializer\Normalizer\ObjectNormalizer;
use Symfony\Component\Serializer\Serializer as SymfonySerializer;

$o = options($argv, [
    // The transport's DSN: stream, consumer group and consumer name in the path.
    'transport-dsn' => env('EXAMPLE_MESSENGER_DSN', 'redis://127.0.0.1:6379/messages/symfony/worker-1'),
    // The failure transport; it needs a group of its own to be read later
    // (messenger:failed:show reads it through the transport).
    'failure-dsn' => env('EXAMPLE_MESSENGER_FAILURE_DSN', 'redis://127.0.0.1:6379/messages_failed/symfony/worker-1'),
    'dbindex' => env('EXAMPLE_REDIS_DB', '0'),
    'dsn' => env('EXAMPLE_PDO_DSN', 'mysql:host=127.0.0.1;port=3306;dbname=app'),
    'user' => env('EXAMPLE_DB_USER', 'app'),
    'password' => env('EXAMPLE_DB_PASSWORD', 'app'),
    'max-retries' => '2',
    'retry-delay-ms' => '100',
    'fail-first-every' => '0',
    'time-limit' => '300',
]);

/** Logs Messenger's retries and failures to stderr. */
final class StderrLogger extends AbstractLogger
{
    public function log($level, $message, array $context = []): void
    {
        $replace = [];
        foreach ($context as $k => $v) {
            if (is_scalar($v)) {
                $replace['{' . $k . '}'] = (string) $v;
            }
        }
        $error = isset($context['error']) ? ' error=' . $context['error'] : '';
        fwrite(STDERR, "[$level] " . strtr((string) $message, $replace) . $error . "\n");
    }
}

$pdo = pdo($o);
// Entries stay in the stream when acknowledged or rejected: other groups,
// `binlog-outbox verify` and `run --trim acked` see them (docs/symfony.md).
$redisOptions = ['dbindex' => (int) $o['dbindex'], 'delete_after_ack' => false, 'delete_after_reject' => false];

// Messenger's Serializer over the Symfony Serializer, as the framework's
// messenger.transport.symfony_serializer service with
// framework.serializer.name_converter: serializer.name_converter.camel_case_to_snake_case.
$serializer = new Serializer(new SymfonySerializer(
    [new DateTimeNormalizer(), new ArrayDenormalizer(), new ObjectNormalizer(null, new CamelCaseToSnakeCaseNameConverter())],
    [new JsonEncoder()]
));
$factory = new RedisTransportFactory();
$transport = $factory->createTransport($o['transport-dsn'], $redisOptions, $serializer);
$failed = $factory->createTransport($o['failure-dsn'], $redisOptions, $serializer);

$path = explode('/', trim((string) parse_url($o['transport-dsn'], PHP_URL_PATH), '/'));
[$stream, $group, $consumer] = $path + ['messages', 'symfony', 'consumer'];

$handler = new OrderHandler($pdo, (int) $o['fail-first-every']);
$bus = new MessageBus([
    new InboxMiddleware($pdo, $group, $consumer, $stream),
    new HandleMessageMiddleware(new HandlersLocator([
        OrderPlaced::class => [$handler],
        OrderPaid::class => [$handler],
        OrderCancelled::class => [$handler],
    ])),
]);

$logger = new StderrLogger();
$dispatcher = new EventDispatcher();
$retry = new MultiplierRetryStrategy((int) $o['max-retries'], (int) $o['retry-delay-ms']);
// A failed message is sent again through its own transport (with a delay:
// the transport keeps it in <stream>__queue until then), and after
// max-retries to the failure transport.
foreach ([
    new SendFailedMessageForRetryListener(new Locator(['outbox' => $transport]), new Locator(['outbox' => $retry]), $logger),
    new SendFailedMessageToFailureTransportListener(new Locator(['outbox' => $failed]), $logger),
    new DispatchPcntlSignalListener(),
    new StopWorkerOnSigtermSignalListener($logger),
    new StopWorkerOnTimeLimitListener((int) $o['time-limit'], $logger),
] as $subscriber) {
    $dispatcher->addSubscriber($subscriber);
}

$worker = new Worker(['outbox' => $transport], $bus, $dispatcher, $logger);
fwrite(STDERR, "worker $consumer consuming stream $stream as group $group\n");
$worker->run(['sleep' => 50000]);
fwrite(STDERR, "worker $consumer stopped\n");
