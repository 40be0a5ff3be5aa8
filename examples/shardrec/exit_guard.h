// A guard against a plugin ending the process: code in a plugin (or in a
// library it loads) that calls exit(0) would otherwise make a failed command
// look like a success. The host calls MarkHostExit() just before main
// returns; any other path through exit() runs the guard's atexit handler,
// which says so on stderr, naming the library being loaded if one was, and
// ends the process with kExitFailure instead of the status exit() was given.
// (_exit, signals and a return from main are not affected.)
#pragma once

namespace shardrec::cli {

// Registers the handler. Call once, first thing in main.
void InstallExitGuard();
// The host is ending the process on purpose, with main's return value.
void MarkHostExit();

}  // namespace shardrec::cli
