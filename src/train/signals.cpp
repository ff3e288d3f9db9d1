// Signal handlers for graceful stop (first signal), duplicates ignored, immediate abort (a later one).
#include "train/signals.h"

#include <csignal>
#include <ctime>

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
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGUSR1, &g_old_usr1, nullptr);
}

bool StopSignals::requested() const { return g_stop_signal != 0; }
int StopSignals::signal_number() const { return g_stop_signal; }

}  // namespace wmtp
