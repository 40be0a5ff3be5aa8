// The one place core includes Boost.DLL. Boost 1.74's DLL headers use
// std::vector without including <vector> when BOOST_DLL_USE_STD_FS is set
// (defined publicly on the core target), so those come first.
#pragma once

#include <string>
#include <vector>

#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
