#pragma once
// tutti: collective and point-to-point communication between processes.

#include "tutti/communicator.h"
#include "tutti/error.h"
#include "tutti/store.h"
#include "tutti/types.h"
#include "tutti/version.h"
#include "tutti/work.h"
