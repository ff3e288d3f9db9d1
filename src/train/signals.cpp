// Signal handlers for graceful stop (first signal), duplicates ignored, immediate abort (a later one).
#include "train/signals.h"

#include <csignal>
#include <ctime>
#include <initializer_list>

namespace wmtp {

namespace {
// Signal handlers cannot take a context pointer: these words are the only process-wide state, and
// only the handler writes them after installation.
volatile std::sig_atomic_t g_stop_signal = 0;
volatile long g_first_ms = 0;  // CLOCK_MONOTONIC of the first signal, milliseconds
long g_window_ms = 5000;
struct sigaction g_old_term, g_old_usr1;

long monotonic_ms() {  // clock_gettime is async-signal-safe (POSIX)
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return long(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// A stop signal that comes before StopSignals exists — while the program's libraries still load
// and initialize (LibTorch's static registrations take a good part of a second), before main — is
// recorded here instead of killing the process: a launcher passing on a scheduler's SIGTERM as
// SIGUSR1 must not end a rank with "exited on signal 10". This handler is installed from the
// executable's .preinit_array, which the dynamic loader runs before any shared library's
// initializers; StopSignals takes the recorded signal over, release_early_signals() hands it back.
volatile std::sig_atomic_t g_early_signal = 0;
extern "C" void on_early_signal(int sig) {
  if (g_early_signal == 0) g_early_signal = sig;
}
void install_early_handlers(int, char**, char**) {
  struct sigaction sa {};
  sa.sa_handler = on_early_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}
__attribute__((section(".preinit_array"), used)) void (*const k_early_handlers)(int, char**,
                                                                                char**) = install_early_handlers;

// What a handler being replaced stands for: the early recorder stands for the default action.
void restore(int sig, const struct sigaction& old) {
  if (old.sa_handler == on_early_signal) std::signal(sig, SIG_DFL);
  else
    sigaction(sig, &old, nullptr);
}

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    if (monotonic_ms() - g_first_ms < g_window_ms) return;  // the same request, delivered twice
    // A second request: the user means it. Default action (terminate) at once.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_first_ms = monotonic_ms();
  g_stop_signal = sig;
}
}  // namespace

StopSignals::StopSignals(double duplicate_window_s) {
  g_stop_signal = 0;
  g_window_ms = long(duplicate_window_s * 1000.0);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGTERM);  // one handler at a time: the two words are written together
  sigaddset(&sa.sa_mask, SIGUSR1);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGUSR1, &sa, &g_old_usr1);
  if (g_early_signal != 0) {  // came during start-up, before main: the same request as one now
    g_first_ms = monotonic_ms();
    g_stop_signal = g_early_signal;
  }
}

StopSignals::~StopSignals() {
  restore(SIGTERM, g_old_term);
  restore(SIGUSR1, g_old_usr1);
}

void release_early_signals() {
  struct sigaction old {};
  for (int sig : {SIGTERM, SIGUSR1}) {
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == on_early_signal) std::signal(sig, SIG_DFL);
  }
  if (g_early_signal != 0) std::raise(g_early_signal);  // what it would have done before main
}

bool StopSignals::requested() const { return g_stop_signal != 0; }
int StopSignals::signal_number() const { return g_stop_signal; }

}  // namespace wmtp
