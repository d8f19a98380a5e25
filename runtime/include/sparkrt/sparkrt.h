// Umbrella header: the whole public runtime API.
#ifndef SPARKRT_SPARKRT_H_
#define SPARKRT_SPARKRT_H_

#include "sparkrt/backends.h"
#include "sparkrt/communicator.h"
#include "sparkrt/device.h"
#include "sparkrt/kernel_launch.h"
#include "sparkrt/kernel_store.h"
#include "sparkrt/signature.h"
#include "sparkrt/types.h"

#endif  // SPARKRT_SPARKRT_H_
