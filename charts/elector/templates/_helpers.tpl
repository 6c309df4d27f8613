{{/*
The chart's name, truncated to the 63 characters of a DNS label.
*/}}
{{- define "elector.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The fully qualified app name: the release name, suffixed with the chart name
unless the release name already contains it.
*/}}
{{- define "elector.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "elector.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object.
*/}}
{{- define "elector.labels" -}}
helm.sh/chart: {{ include "elector.chart" . }}
{{ include "elector.selectorLabels" . }}
app.kubernetes.io/version: {{ include "elector.imageTag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels that select the pods; they must never change for a release.
*/}}
{{- define "elector.selectorLabels" -}}
app.kubernetes.io/name: {{ include "elector.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "elector.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "elector.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "elector.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{- define "elector.image" -}}
{{- printf "%s:%s" .Values.image.repository (include "elector.imageTag" .) }}
{{- end }}

{{- define "elector.appImage" -}}
{{- if .Values.app.image.tag }}
{{- printf "%s:%s" .Values.app.image.repository .Values.app.image.tag }}
{{- else }}
{{- .Values.app.image.repository }}
{{- end }}
{{- end }}

{{- define "elector.leaseName" -}}
{{- default (include "elector.fullname" .) .Values.lease.name }}
{{- end }}

{{/*
Paths shared by the templates.
*/}}
{{- define "elector.statusDir" -}}/var/run/elector{{- end }}
{{- define "elector.statusFile" -}}{{ include "elector.statusDir" . }}/status{{- end }}
{{- define "elector.binDir" -}}/elector-bin{{- end }}
{{- define "elector.redisDir" -}}/etc/elector/redis{{- end }}

{{/*
Whether the pod mounts the Redis credentials volume (passwords and/or TLS files).
*/}}
{{- define "elector.hasRedisCredentials" -}}
{{- with .Values.redis }}
{{- if or .existingSecret .tls.caSecret .tls.clientCertSecret (and (eq .mode "sentinel") .sentinelExistingSecret) }}true{{ end }}
{{- end }}
{{- end }}

{{/*
The duration (a Go duration string such as "1m30s") in milliseconds, a
float that is exact for whole milliseconds.
*/}}
{{- define "elector.durationMillis" -}}
{{- $factors := dict "ns" 0.000001 "us" 0.001 "µs" 0.001 "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0 }}
{{- $total := 0.0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" . -1 }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . }}
{{- $unit := trimPrefix $number . }}
{{- $total = addf $total (mulf (float64 $number) (get $factors $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
Flags shared by `elector sidecar` and `elector run`, one per line of a YAML
list.
*/}}
{{- define "elector.commonArgs" -}}
{{- $addr := .Values.redis.addr }}
{{- if kindIs "slice" $addr }}{{ $addr = join "," $addr }}{{ end }}
- --redis-addr={{ $addr }}
- --redis-mode={{ .Values.redis.mode }}
{{- if eq .Values.redis.mode "sentinel" }}
- --sentinel-master={{ .Values.redis.sentinelMaster }}
{{- with .Values.redis.sentinelUsername }}
- --sentinel-username={{ . }}
{{- end }}
{{- if .Values.redis.sentinelExistingSecret }}
- --sentinel-password-file={{ include "elector.redisDir" . }}/sentinel-password
{{- end }}
{{- end }}
{{- with .Values.redis.username }}
- --redis-username={{ . }}
{{- end }}
{{- if .Values.redis.db }}
- --redis-db={{ .Values.redis.db }}
{{- end }}
{{- if .Values.redis.existingSecret }}
- --redis-password-file={{ include "elector.redisDir" . }}/password
{{- end }}
{{- with .Values.redis.tls }}
{{- if .enabled }}
- --redis-tls
{{- if .caSecret }}
- --redis-tls-ca-file={{ include "elector.redisDir" $ }}/ca.crt
{{- end }}
{{- if .clientCertSecret }}
- --redis-tls-cert-file={{ include "elector.redisDir" $ }}/tls.crt
- --redis-tls-key-file={{ include "elector.redisDir" $ }}/tls.key
{{- end }}
{{- with .serverName }}
- --redis-tls-server-name={{ . }}
{{- end }}
{{- end }}
{{- end }}
- --lease-name={{ include "elector.leaseName" . }}
- --key-prefix={{ .Values.lease.keyPrefix }}
- --lease-duration={{ .Values.lease.duration }}
- --renew-deadline={{ .Values.lease.renewDeadline }}
- --retry-period={{ .Values.lease.retryPeriod }}
- --v={{ .Values.logVerbosity }}
{{- end }}

{{/*
Environment of the container that runs the elector. POD_NAME is the default
--identity: a replica is known by its pod's name.
*/}}
{{- define "elector.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      apiVersion: v1
      fieldPath: metadata.name
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Volume mounts of the container that runs the elector.
*/}}
{{- define "elector.volumeMounts" -}}
{{- if include "elector.hasRedisCredentials" . }}
- name: redis-credentials
  mountPath: {{ include "elector.redisDir" . }}
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The elector's probes. Liveness never depends on leadership; readiness does
only with gateReadiness.
*/}}
{{- define "elector.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: http-elector
  periodSeconds: 1
  failureThreshold: 30
livenessProbe:
  httpGet:
    path: /healthz
    port: http-elector
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
readinessProbe:
{{- if .Values.gateReadiness }}
  httpGet:
    path: /readyz
    port: http-elector
  # Fast, so that a Service follows a new leader within a few seconds.
  periodSeconds: 2
  timeoutSeconds: 1
  failureThreshold: 1
{{- else }}
  httpGet:
    path: /healthz
    port: http-elector
  periodSeconds: 10
  timeoutSeconds: 2
  failureThreshold: 3
{{- end }}
{{- end }}

{{- define "elector.httpPort" -}}
- name: http-elector
  containerPort: {{ .Values.http.port }}
  protocol: TCP
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
Checks across values that the schema cannot express.
*/}}
{{- define "elector.validate" -}}
{{- if and (eq .Values.mode "run") (empty .Values.app.command) }}
{{- fail "mode run needs app.command: the chart runs `elector run -- <app.command> <app.args>` and cannot wrap the image's own entrypoint" }}
{{- end }}
{{- if and (eq .Values.mode "run") (or .Values.app.livenessProbe .Values.app.readinessProbe .Values.app.startupProbe) }}
{{- fail "mode run does not use app.livenessProbe, app.readinessProbe or app.startupProbe: the command runs on the leader only, so followers would fail them; the chart probes the elector's /healthz instead" }}
{{- end }}
{{- if and (eq .Values.redis.mode "sentinel") (not .Values.redis.sentinelMaster) }}
{{- fail "redis.mode sentinel needs redis.sentinelMaster" }}
{{- end }}
{{- if and (eq .Values.mode "sidecar") .Values.sidecar.native (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "sidecar.native needs Kubernetes >= 1.29 (native sidecar containers), this is %s: set sidecar.native=false" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- if and .Values.gateReadiness .Values.strategy }}
{{- fail "gateReadiness sets the Deployment strategy itself (RollingUpdate, maxUnavailable 100%, see docs/KUBERNETES.md): leave strategy empty" }}
{{- end }}
{{- if and .Values.redis.tls.clientCertSecret (not .Values.redis.tls.enabled) }}
{{- fail "redis.tls.clientCertSecret needs redis.tls.enabled" }}
{{- end }}
{{- if and .Values.redis.tls.caSecret (not .Values.redis.tls.enabled) }}
{{- fail "redis.tls.caSecret needs redis.tls.enabled" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled" }}
{{- end }}
{{- $duration := include "elector.durationMillis" .Values.lease.duration | float64 }}
{{- $renew := include "elector.durationMillis" .Values.lease.renewDeadline | float64 }}
{{- $retry := include "elector.durationMillis" .Values.lease.retryPeriod | float64 }}
{{- if not (gt $duration $renew) }}
{{- fail (printf "lease.duration (%s) must be longer than lease.renewDeadline (%s)" .Values.lease.duration .Values.lease.renewDeadline) }}
{{- end }}
{{- /* renewDeadline > 1.2 × retryPeriod, as client-go and the CLI require (retries are jittered by up to 20%) */}}
{{- if not (gt (mulf $renew 5) (mulf $retry 6)) }}
{{- fail (printf "lease.renewDeadline (%s) must be longer than 1.2 × lease.retryPeriod (%s): retries are jittered by up to 20%%" .Values.lease.renewDeadline .Values.lease.retryPeriod) }}
{{- end }}
{{- if eq .Values.mode "run" }}
{{- $need := add (divf (include "elector.durationMillis" .Values.run.killGrace | float64) 1000 | ceil | int) 5 }}
{{- if lt (int .Values.terminationGracePeriodSeconds) $need }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be at least run.killGrace (%s) + 5s for the release: %d" .Values.terminationGracePeriodSeconds .Values.run.killGrace $need) }}
{{- end }}
{{- end }}
{{- end }}
