<?php

declare(strict_types=1);

namespace BinlogOutbox\Laravel;

use LogicException;

/**
 * NotInTransaction is thrown by Outbox::record outside a database
 * transaction: an event written on its own commits whether or not the state
 * change it announces does, the very bug the outbox exists to prevent.
 */
final class NotInTransaction extends LogicException
{
}
