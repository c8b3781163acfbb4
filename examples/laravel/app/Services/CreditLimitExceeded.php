<?php

namespace App\Services;

/** CreditLimitExceeded rolls back the placing of an order, its event with it. */
class CreditLimitExceeded extends \RuntimeException
{
}
