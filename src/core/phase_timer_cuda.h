// The CUDA side of core/phase_timer.h (phase_timer_cuda.cpp, compiled with WMTP_WITH_CUDA only):
// timing events on the calling thread's current stream. Internal: use PhaseTimer.
#pragma once
#ifdef WMTP_WITH_CUDA
namespace wmtp::phase_cuda {
void* create_event();  // a cudaEvent_t with timing enabled
void destroy_event(void* event);
void record(void* event);                        // on the current stream of the current device
bool finished(void* event);                      // cudaEventQuery: the stream has passed it (no wait)
double elapsed_seconds(void* start, void* end);  // waits for `end`
}  // namespace wmtp::phase_cuda
#endif
