#include <stdlib.h>
#include "opsh_session_route.h"

opsh_session_route *opsh_session_route_new(void) { return calloc(1, sizeof(opsh_session_route)); }
void opsh_session_route_free(opsh_session_route *route) { free(route); }
