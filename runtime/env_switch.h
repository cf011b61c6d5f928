// On/off switches read from the environment (the rule for unrun GPU code in docs/DESIGN.md, whose section
// "Waiting for their run" lists those there are): "1" on; unset, empty or "0" off; anything else is an error
// naming the variable, so a typo never silently runs the default.
#pragma once

namespace zt {

bool read_env_switch(const char* name);

}  // namespace zt
