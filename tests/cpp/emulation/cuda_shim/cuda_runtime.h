// See cuda_runtime_api.h: the CPU stand-in used by tests/cpp/emulation.
#pragma once
#include "cuda_runtime_api.h"
