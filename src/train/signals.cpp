// Signal handlers for graceful stop (first signal) and immediate abort (second signal).
#include "train/signals.h"

#include <csignal>

namespace wmtp {

namespace {
// Signal handlers cannot take a context pointer: these two words are the only process-wide state,
// and only the handler writes them.
volatile std::sig_atomic_t g_stop_signal = 0;
struct sigaction g_old_term, g_old_usr1;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    // Second signal: the user means it. Default action (terminate) at once.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop_signal = sig;
}
}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
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
