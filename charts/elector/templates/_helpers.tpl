{{/*
Whether the app is the chart's demo: no app image is given. Nothing of the
demo (image, script, security context) applies to a user's app.
*/}}
{{- define "elector.demo" -}}
{{- if not .Values.app.image.repository }}true{{ end }}
{{- end }}

{{/*
The demo's image, under global.imageRegistry when one is set (app.image.registry
belongs to the user's app, not to the demo).
*/}}
{{- define "elector.demoImage" -}}
{{- $registry := include "elector.imageRegistry" (dict "global" .Values.global "image" dict) }}
{{- include "elector.imageRef" (dict "registry" $registry "repository" "busybox" "tag" "1.37") }}
{{- end }}

{{- define "elector.appImage" -}}
{{- if include "elector.demo" . }}
{{- include "elector.demoImage" . }}
{{- else }}
{{- $registry := include "elector.imageRegistry" (dict "global" .Values.global "image" .Values.app.image) }}
{{- include "elector.imageRef" (merge (dict "registry" $registry) .Values.app.image) }}
{{- end }}
{{- end }}

{{/*
The demo's script: it prints the replica's role every 10 s (sidecar mode) or,
on the leader only, its fencing token (run mode), and stops on SIGTERM.
*/}}
{{- define "elector.demoScript" -}}
{{- if eq .Values.mode "run" -}}
trap 'exit 0' TERM
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $ELECTOR_IDENTITY leads $ELECTOR_LEASE_NAME with fencing token $ELECTOR_FENCING_TOKEN"
while true; do sleep 10 & wait $!; done
{{- else -}}
trap 'exit 0' TERM
while true; do
  # The documented check: "leader" and a deadline that has not passed.
  role=follower
  if { read -r s; read -r u; } < "$ELECTOR_STATUS_FILE" && [ "$s" = leader ] && [ "$(date +%s)" -lt "${u#until_unix=}" ]; then role=leader; fi 2>/dev/null
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $HOSTNAME: $role"
  sleep 10 & wait $!
done
{{- end }}
{{- end }}

{{/*
The app's command and args as JSON {"command": [...], "args": [...]}: the
user's, verbatim, or the demo's when the app is the demo and neither is set.
*/}}
{{- define "elector.appArgv" -}}
{{- $command := .Values.app.command | default list }}
{{- $args := .Values.app.args | default list }}
{{- if and (include "elector.demo" .) (empty $command) (empty $args) }}
{{- $command = list "sh" "-c" (include "elector.demoScript" .) }}
{{- end }}
{{- dict "command" $command "args" $args | toJson }}
{{- end }}

{{/*
The app container's security context: app.securityContext; for the demo,
the elector's restricted one unless app.securityContext is set.
*/}}
{{- define "elector.appSecurityContext" -}}
{{- if .Values.app.securityContext }}
{{- toYaml .Values.app.securityContext }}
{{- else if include "elector.demo" . }}
{{- toYaml .Values.securityContext }}
{{- end }}
{{- end }}

{{/*
The volumes of `helm test`'s pod: the Redis credentials and the user's extra
volumes, never the elector's API token or resign token, which it does not use.
*/}}
{{- define "elector.testVolumeMounts" -}}
{{- include "elector.redisVolumeMounts" . }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "elector.testVolumes" -}}
{{- include "elector.redisVolumes" . }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The seconds of a lifecycle's preStop sleep action (lifecycle.preStop.sleep);
0 without one. The time an exec or httpGet hook takes is unknown to the chart.
*/}}
{{- define "elector.preStopSleep" -}}
{{- ((((. | default dict).preStop | default dict).sleep | default dict).seconds | default 0) | int64 }}
{{- end }}

{{/*
The least terminationGracePeriodSeconds the pod needs, in seconds: the
kubelet's grace covers the preStop hooks, then the stop of the app (in run
mode up to run.killGrace for the command), then the elector's release of the
lease and its exit (5 s). Hooks are counted one after the other, as a native
sidecar's runs only after the app has stopped. Past the grace the kubelet
kills the elector before it releases: the next leader then waits for
lease.duration. The parts are named by elector.terminationGraceParts.
*/}}
{{- define "elector.terminationGraceNeeded" -}}
{{- $ns := 5000000000 }}
{{- if eq .Values.mode "run" }}
{{- $ns = add $ns (include "elector.durationNanos" .Values.run.killGrace | int64) }}
{{- else }}
{{- $ns = add $ns (mul (include "elector.preStopSleep" .Values.sidecar.lifecycle | int64) 1000000000) }}
{{- end }}
{{- $ns = add $ns (mul (include "elector.preStopSleep" .Values.app.lifecycle | int64) 1000000000) }}
{{- div (add $ns 999999999) 1000000000 }}
{{- end }}

{{- define "elector.terminationGraceParts" -}}
{{- $parts := list }}
{{- with include "elector.preStopSleep" .Values.app.lifecycle | int64 }}
{{- $parts = append $parts (printf "app.lifecycle's preStop sleep (%ds)" .) }}
{{- end }}
{{- if eq .Values.mode "run" }}
{{- $parts = append $parts (printf "run.killGrace (%s)" .Values.run.killGrace) }}
{{- else }}
{{- with include "elector.preStopSleep" .Values.sidecar.lifecycle | int64 }}
{{- $parts = append $parts (printf "sidecar.lifecycle's preStop sleep (%ds)" .) }}
{{- end }}
{{- end }}
{{- $parts = append $parts "5s for the release" }}
{{- join " + " $parts }}
{{- end }}

{{/*
A duration (nanoseconds) as a Prometheus duration: whole seconds or
milliseconds.
*/}}
{{- define "elector.promDuration" -}}
{{- $ns := int64 . }}
{{- if eq (mod $ns 1000000000) 0 }}{{ div $ns 1000000000 }}s
{{- else }}{{ div (add $ns 999999) 1000000 }}ms
{{- end }}
{{- end }}

{{/*
The flags of `elector run --schedule` when schedule.spec is set, one per line
of a YAML list: the spec, and each option that differs from elector run's
default (docs/CLI.md, "Flags of run").
*/}}
{{- define "elector.scheduleArgs" -}}
{{- with .Values.schedule }}
{{- if .spec }}
- {{ printf "--schedule=%s" .spec | toJson }}
{{- if ne .timeZone "UTC" }}
- {{ printf "--time-zone=%s" .timeZone | toJson }}
{{- end }}
{{- if ne .overlap "skip" }}
- --overlap={{ .overlap }}
{{- end }}
{{- if ne .catchUp "latest" }}
- --catch-up={{ .catchUp }}
{{- end }}
{{- if ne (include "elector.durationNanos" .startingDeadline | int64) 0 }}
- --starting-deadline={{ .startingDeadline }}
{{- end }}
{{- if ne (int64 .maxAttempts) 3 }}
- --max-attempts={{ int64 .maxAttempts }}
{{- end }}
{{- if ne (include "elector.durationNanos" .retryDelay | int64) 10000000000 }}
- --retry-delay={{ .retryDelay }}
{{- end }}
{{- if ne (int64 .history) 100 }}
- --schedule-history={{ int64 .history }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The period after which ElectorScheduleNoSuccess fires, a Prometheus duration:
metrics.prometheusRule.schedule.noSuccessFor, or twice the period of a
descriptor spec; a five-field spec's period the chart cannot tell.
*/}}
{{- define "elector.scheduleNoSuccessFor" -}}
{{- $spec := .Values.schedule.spec | trim }}
{{- $periods := dict "@hourly" "2h" "@daily" "2d" "@midnight" "2d" "@weekly" "2w" "@monthly" "62d" "@yearly" "2y" "@annually" "2y" }}
{{- if .Values.metrics.prometheusRule.schedule.noSuccessFor }}{{ .Values.metrics.prometheusRule.schedule.noSuccessFor }}
{{- else if hasKey $periods $spec }}{{ get $periods $spec }}
{{- else if hasPrefix "@every" $spec }}
{{- include "elector.promDuration" (mul 2 (include "elector.durationNanos" (trimPrefix "@every" $spec | trim) | int64)) }}
{{- else }}
{{- fail (printf "metrics.prometheusRule.schedule.noSuccessFor: set it for schedule.spec %q (e.g. two periods of the schedule plus the run's length, 2d for a daily run): the chart cannot tell the period of five cron fields" .Values.schedule.spec) }}
{{- end }}
{{- end }}

{{/*
A Prometheus duration (1h30m, 2d, 500ms) in seconds, for a comparison in
PromQL: an integer, or a decimal for milliseconds.
*/}}
{{- define "elector.promSeconds" -}}
{{- $factors := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 "w" 604800000 "y" 31536000000 }}
{{- $ms := 0 }}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d|w|y)" . -1 }}
{{- $unit := regexFind "[a-z]+$" . }}
{{- $ms = add $ms (mul (trimSuffix $unit . | int64) (get $factors $unit)) }}
{{- end }}
{{- if eq (mod $ms 1000) 0 }}{{ div $ms 1000 }}{{ else }}{{ div $ms 1000 }}.{{ printf "%03d" (mod $ms 1000) }}{{ end }}
{{- end }}

{{/*
The Deployment strategy. With gateReadiness only the leader is ever Ready, so
a rollout that waits for new pods to be Ready never ends (a new pod cannot
lead while the old leader lives): replace the old pods without waiting.
*/}}
{{- define "elector.strategy" -}}
{{- if .Values.gateReadiness }}
type: RollingUpdate
rollingUpdate:
  maxSurge: 1
  maxUnavailable: 100%
{{- else if .Values.strategy }}
{{- toYaml .Values.strategy }}
{{- else }}
type: RollingUpdate
rollingUpdate:
  maxSurge: 1
  maxUnavailable: 0
{{- end }}
{{- end }}

{{/*
topologySpreadConstraints, each with the pods' selector unless it has one.
*/}}
{{- define "elector.topologySpreadConstraints" -}}
{{- $selector := include "elector.selectorLabels" . | fromYaml }}
{{- $out := list }}
{{- range .Values.topologySpreadConstraints }}
{{- $c := deepCopy . }}
{{- if not (hasKey $c "labelSelector") }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $selector) }}
{{- end }}
{{- $out = append $out $c }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
Checks across values that the schema cannot express: the library's
(elector.validate), then the chart's own.
*/}}
{{- define "elector.validateChart" -}}
{{- include "elector.validate" . }}
{{- if and (eq .Values.mode "run") (or .Values.app.livenessProbe .Values.app.readinessProbe .Values.app.startupProbe) }}
{{- fail "mode run does not use app.livenessProbe, app.readinessProbe or app.startupProbe: the command runs on the leader only, so followers would fail them; the chart probes the elector's /healthz instead" }}
{{- end }}
{{- if and .Values.gateReadiness .Values.strategy }}
{{- fail "gateReadiness sets the Deployment strategy itself (RollingUpdate, maxUnavailable 100%, see docs/KUBERNETES.md): leave strategy empty" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled" }}
{{- end }}
{{- if eq .Values.mode "run" }}
{{- /* SIGTERM, then up to killGrace for the command, then the release and the exit: 5 s */}}
{{- $killGrace := include "elector.durationNanos" .Values.run.killGrace | int64 }}
{{- $bound := include "elector.killGraceBound" . | int64 }}
{{- if gt $killGrace $bound }}
{{- fail (printf "run.killGrace (%s) is longer than its bound, lease.duration - lease.renewDeadline - (1%% of lease.duration + 2ms) = %s - %s - the drift margin = %s: a command that lost leadership could still run when the next leader's starts (elector run refuses it too); shorten run.killGrace or lengthen lease.duration" .Values.run.killGrace .Values.lease.duration .Values.lease.renewDeadline (include "elector.formatNanos" $bound)) }}
{{- end }}
{{- if and (empty .Values.app.command) (not (and (include "elector.demo" .) (empty .Values.app.args))) }}
{{- fail "mode run needs app.command: the chart runs `elector run -- <app.command> <app.args>` and cannot wrap the image's own entrypoint" }}
{{- end }}
{{- end }}
{{- $need := include "elector.terminationGraceNeeded" . | int64 }}
{{- if lt (int64 .Values.terminationGracePeriodSeconds) $need }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be at least %s: %d (past it the kubelet kills the elector before it releases the lease)" .Values.terminationGracePeriodSeconds (include "elector.terminationGraceParts" .) $need) }}
{{- end }}
{{- if eq .Values.workload.kind "StatefulSet" }}
{{- if .Values.gateReadiness }}
{{- fail "workload.kind StatefulSet and gateReadiness: a StatefulSet rollout replaces one pod at a time and waits for it to be Ready, which a follower never is with gateReadiness, so the rollout would stop at the first follower; select the leader with leaderLabel and leaderService instead" }}
{{- end }}
{{- if .Values.strategy }}
{{- fail "strategy is the Deployment's: with workload.kind StatefulSet set workload.statefulSet.updateStrategy" }}
{{- end }}
{{- else if or .Values.workload.statefulSet.updateStrategy .Values.workload.statefulSet.volumeClaimTemplates }}
{{- fail "workload.statefulSet.updateStrategy and volumeClaimTemplates need workload.kind StatefulSet" }}
{{- end }}
{{- if and (not .Values.app.image.repository) (or .Values.app.image.tag .Values.app.image.digest .Values.app.image.registry) }}
{{- fail "app.image.registry, app.image.tag and app.image.digest need app.image.repository (empty: the demo image)" }}
{{- end }}
{{- end }}
