// Limits of the tracking keys of [logging].
#include "track/tracking_config.h"

#include "core/error.h"
#include "track/mlflow_store.h"

namespace wmtp {

void TrackingConfig::validate() const {
  if (!mlflow_uri.empty()) {
    const MlflowUri u = parse_mlflow_uri(mlflow_uri);
    if (u.kind == MlflowUri::Kind::Invalid)
      throw_usage("[logging] mlflow_uri = '", redact_uri(mlflow_uri), "': ", u.problem);
    if (mlflow_experiment.empty()) throw_usage("[logging] mlflow_experiment must not be empty when mlflow_uri is set");
  }
  if (!(mlflow_timeout_sec > 0 && mlflow_timeout_sec <= kMaxMlflowTimeoutSec))
    throw_usage("[logging] mlflow_timeout_sec = ", mlflow_timeout_sec, ": expected seconds in (0, ",
                kMaxMlflowTimeoutSec, "]");
}

}  // namespace wmtp
