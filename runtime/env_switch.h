// On/off switches read from the environment (none today: the rule for unrun GPU code in
// docs/DESIGN.md): "1" on; unset, empty or "0" off; anything else is an error naming the variable, so a typo
// never silently runs the default.
#pragma once

namespace zt {

bool read_env_switch(const char* name);

}  // namespace zt
