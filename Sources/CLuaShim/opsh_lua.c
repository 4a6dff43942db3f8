#include "opsh_lua.h"
