// Stop-on-signal: SIGTERM or SIGUSR1 (Slurm's warning before the time limit, or preemption) asks
// the trainer to finish the current step on all ranks, checkpoint and exit 75 ("resume me"). A
// second signal aborts at once. The handler only sets a sig_atomic_t (async-signal-safe); ranks
// agree on stopping by all-reduce at step boundaries, since Slurm may signal ranks at different
// moments or only some of them.
//
// Repeats within `duplicate_window_s` of the first signal are the same request delivered by several
// layers (Slurm signalling the tasks and the batch script, a launcher passing it on to mpirun and to
// its ranks, mpirun forwarding): they are ignored. A signal after the window aborts.
//
// From exec on, before main and the libraries' initializers, a stop signal is recorded rather than
// fatal (signals.cpp, the executable's .preinit_array); StopSignals acts on it. A program that does
// not stop on signals calls release_early_signals() first thing: the default actions are back, and a
// signal recorded before main takes effect then.
#pragma once

namespace wmtp {

class StopSignals {
 public:
  explicit StopSignals(double duplicate_window_s = 5.0);  // installs the handlers
  ~StopSignals();                                         // restores the previous handlers
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const;  // this rank saw a signal
  int signal_number() const;
};

// For a program without StopSignals: SIGTERM/SIGUSR1 back to their default action, and one recorded
// before main raised now.
void release_early_signals();

}  // namespace wmtp
