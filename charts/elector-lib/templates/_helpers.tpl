{{/*
The app's name (app.kubernetes.io/name): the release name, or nameOverride.
The chart wraps the user's app, so nothing is named after the chart.
*/}}
{{- define "elector.name" -}}
{{- default .Release.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every object: fullnameOverride, else the release name, suffixed
with nameOverride unless the release name already contains it.
*/}}
{{- define "elector.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if and .Values.nameOverride (not (contains .Values.nameOverride .Release.Name)) }}
{{- printf "%s-%s" .Release.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
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
app.kubernetes.io/version: {{ include "elector.appVersion" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels that select the pods; they must never change for a release. A chart
that includes the library passes its own (SelectorLabels in the context).
*/}}
{{- define "elector.selectorLabels" -}}
{{- if .SelectorLabels }}
{{- toYaml .SelectorLabels }}
{{- else -}}
app.kubernetes.io/name: {{ include "elector.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- end }}

{{/*
The pods' ServiceAccount, which the RoleBinding names: the context's
ServiceAccountName when the including chart passes one, else
serviceAccount.name, or the fullname when serviceAccount.create.
*/}}
{{- define "elector.serviceAccountName" -}}
{{- if .ServiceAccountName }}
{{- .ServiceAccountName }}
{{- else if .Values.serviceAccount.create }}
{{- default (include "elector.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The app's version (app.kubernetes.io/version): the app image's tag, else the
elector's version (the demo, or an app pinned by digest only).
*/}}
{{- define "elector.appVersion" -}}
{{- $image := (.Values.app | default dict).image | default dict }}
{{- $tag := and $image.repository $image.tag }}
{{- default .Chart.AppVersion $tag | replace "+" "_" | trunc 63 | trimSuffix "-" | trimSuffix "_" | trimSuffix "." }}
{{- end }}

{{/*
The elector release this library deploys by default: its appVersion, which
charts/elector's appVersion equals (test/helm checks both). A constant, as a
library's own .Chart is not in the context of the chart that includes it.
*/}}
{{- define "elector.version" -}}0.1.0{{- end }}

{{- define "elector.imageTag" -}}
{{- default (include "elector.version" .) .Values.image.tag }}
{{- end }}

{{/*
The registry that overrides an image's own, bitnami-style: global.imageRegistry
when set, else the image's registry (dict "global" .Values.global "image" IMAGE).
*/}}
{{- define "elector.imageRegistry" -}}
{{- (.global | default dict).imageRegistry | default .image.registry | default "" | trimSuffix "/" }}
{{- end }}

{{/*
An image's repository under a registry (dict "registry" R "repository" REPO):
without a registry, the repository as is; with one, the repository as Docker
resolves it (a first component with a "." or ":", or "localhost", is its
registry; a one-word name is library/NAME on Docker Hub) with its registry
replaced by R: ghcr.io/elector/elector under mirror.example.com is
mirror.example.com/elector/elector, busybox is mirror.example.com/library/busybox.
*/}}
{{- define "elector.registryRepository" -}}
{{- $repository := .repository }}
{{- if .registry }}
{{- $parts := splitList "/" $repository }}
{{- $first := first $parts }}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- $repository = join "/" (rest $parts) }}
{{- else if eq (len $parts) 1 }}
{{- $repository = printf "library/%s" $repository }}
{{- end }}
{{- $repository = printf "%s/%s" .registry $repository }}
{{- end }}
{{- $repository }}
{{- end }}

{{/*
An image reference: repository@digest when a digest pins it, else
repository:tag (or the bare repository without a tag); the repository under
.registry when one is given.
*/}}
{{- define "elector.imageRef" -}}
{{- $repository := include "elector.registryRepository" (dict "registry" .registry "repository" .repository) }}
{{- if .digest }}
{{- printf "%s@%s" $repository .digest }}
{{- else if .tag }}
{{- printf "%s:%s" $repository .tag }}
{{- else }}
{{- $repository }}
{{- end }}
{{- end }}

{{- define "elector.image" -}}
{{- $registry := include "elector.imageRegistry" (dict "global" .Values.global "image" .Values.image) }}
{{- include "elector.imageRef" (dict "registry" $registry "repository" .Values.image.repository "tag" (include "elector.imageTag" .) "digest" .Values.image.digest) }}
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
{{- define "elector.resignDir" -}}/etc/elector/resign{{- end }}

{{/*
Whether the pod mounts the Redis credentials volume (passwords and/or TLS files).
*/}}
{{- define "elector.hasRedisCredentials" -}}
{{- with .Values.redis }}
{{- if or .existingSecret .tls.caSecret .tls.clientCertSecret (and (eq .mode "sentinel") .sentinelExistingSecret) }}true{{ end }}
{{- end }}
{{- end }}

{{/*
The Redis credentials: the mount and the volume, for every pod that talks to
Redis (the Deployment's and `helm test`'s), each a list item or nothing.
*/}}
{{- define "elector.redisVolumeMounts" -}}
{{- if include "elector.hasRedisCredentials" . }}
- name: redis-credentials
  mountPath: {{ include "elector.redisDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{- define "elector.redisVolumes" -}}
{{- if include "elector.hasRedisCredentials" . }}
- name: redis-credentials
  projected:
    defaultMode: 0440
    sources:
      {{- with .Values.redis.existingSecret }}
      - secret:
          name: {{ . }}
          items:
            - key: {{ $.Values.redis.existingSecretPasswordKey }}
              path: password
      {{- end }}
      {{- if and (eq .Values.redis.mode "sentinel") .Values.redis.sentinelExistingSecret }}
      - secret:
          name: {{ .Values.redis.sentinelExistingSecret }}
          items:
            - key: {{ .Values.redis.sentinelExistingSecretPasswordKey }}
              path: sentinel-password
      {{- end }}
      {{- with .Values.redis.tls.caSecret }}
      - secret:
          name: {{ . }}
          items:
            - key: {{ $.Values.redis.tls.caSecretKey }}
              path: ca.crt
      {{- end }}
      {{- with .Values.redis.tls.clientCertSecret }}
      - secret:
          name: {{ . }}
          items:
            - key: tls.crt
              path: tls.crt
            - key: tls.key
              path: tls.key
      {{- end }}
{{- end }}
{{- end }}

{{/*
The duration (a Go duration string such as "1m30s") in whole nanoseconds, an
int64, so that the chart's arithmetic is the elector's (time.Duration).
*/}}
{{- define "elector.durationNanos" -}}
{{- $factors := dict "ns" 1.0 "us" 1000.0 "µs" 1000.0 "ms" 1000000.0 "s" 1000000000.0 "m" 60000000000.0 "h" 3600000000000.0 }}
{{- $total := 0 }}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" . -1 }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . }}
{{- $unit := trimPrefix $number . }}
{{- $total = add $total (round (mulf (float64 $number) (get $factors $unit)) 0 | int64) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
A duration in nanoseconds (an int64) as Go prints it for whole milliseconds
and seconds: 4848ms, 5s.
*/}}
{{- define "elector.formatNanos" -}}
{{- $ns := int64 . }}
{{- if eq (mod $ns 1000000000) 0 }}{{ div $ns 1000000000 }}s
{{- else if eq (mod $ns 1000000) 0 }}{{ div $ns 1000000 }}ms
{{- else }}{{ $ns }}ns
{{- end }}
{{- end }}

{{/*
The longest kill grace after which a command that lost leadership has surely
stopped before another replica can start one, in nanoseconds:
lease.duration − lease.renewDeadline − the clock-drift margin (1% of
lease.duration + 2ms, pkg/election.DriftMargin).
*/}}
{{- define "elector.killGraceBound" -}}
{{- $duration := include "elector.durationNanos" .Values.lease.duration | int64 }}
{{- $renew := include "elector.durationNanos" .Values.lease.renewDeadline | int64 }}
{{- sub (sub $duration $renew) (add (div $duration 100) 2000000) }}
{{- end }}

{{/*
Flags that every elector command takes, `elector status` (the helm test) included:
how to reach Redis and which lease to read, one per line of a YAML list.
*/}}
{{- define "elector.readArgs" -}}
{{- $addr := .Values.redis.addr }}
{{- if kindIs "slice" $addr }}{{ $addr = join "," $addr }}{{ end }}
- --redis-addr={{ $addr }}
- --redis-mode={{ .Values.redis.mode }}
{{- if ne .Values.redis.scripts "auto" }}
- --redis-scripts={{ .Values.redis.scripts }}
{{- end }}
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
- --v={{ .Values.logVerbosity }}
{{- end }}

{{/*
Arguments of the elector that campaigns (sidecar and run): how to read the lease
(elector.readArgs) and the timing of a term.
*/}}
{{- define "elector.commonArgs" -}}
{{ include "elector.readArgs" . }}
- --lease-duration={{ .Values.lease.duration }}
- --renew-deadline={{ .Values.lease.renewDeadline }}
- --retry-period={{ .Values.lease.retryPeriod }}
{{- if .Values.leaderLabel.enabled }}
- --leader-label={{ .Values.leaderLabel.key }}
{{- end }}
{{- if .Values.events.enabled }}
- --events
{{- end }}
{{- if .Values.mirrorLease.enabled }}
- --mirror-lease={{ include "elector.fullname" . }}
{{- end }}
{{- if .Values.resign.tokenSecret }}
- --resign-token-file={{ include "elector.resignDir" . }}/token
{{- end }}
{{- end }}

{{/*
"true" when the elector talks to the Kubernetes API (leaderLabel, events):
then it gets the pod's namespace, UID and node from the downward API, a
service-account token of its own, and the chart a Role.
*/}}
{{- define "elector.kubeAPI" -}}
{{- if or .Values.leaderLabel.enabled .Values.events.enabled .Values.mirrorLease.enabled }}true{{ end }}
{{- end }}

{{/*
Where the elector reads its service-account token, CA and namespace: the
standard path, mounted in its container only.
*/}}
{{- define "elector.kubeAPIDir" -}}/var/run/secrets/kubernetes.io/serviceaccount{{- end }}

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
{{- if include "elector.kubeAPI" . }}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      apiVersion: v1
      fieldPath: metadata.namespace
- name: POD_UID
  valueFrom:
    fieldRef:
      apiVersion: v1
      fieldPath: metadata.uid
- name: NODE_NAME
  valueFrom:
    fieldRef:
      apiVersion: v1
      fieldPath: spec.nodeName
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Volume mounts of the container that runs the elector.
*/}}
{{- define "elector.volumeMounts" -}}
{{- if include "elector.kubeAPI" . }}
- name: elector-kube-api
  mountPath: {{ include "elector.kubeAPIDir" . }}
  readOnly: true
{{- end }}
{{- include "elector.redisVolumeMounts" . }}
{{- if .Values.resign.tokenSecret }}
- name: resign-token
  mountPath: {{ include "elector.resignDir" . }}
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
Checks of the elector's values that the schema cannot express; every chart
that renders the elector includes it once.
*/}}
{{- define "elector.validate" -}}
{{- if and (eq .Values.redis.mode "sentinel") (not .Values.redis.sentinelMaster) }}
{{- fail "redis.mode sentinel needs redis.sentinelMaster" }}
{{- end }}
{{- if and (eq (.Values.mode | default "sidecar") "sidecar") .Values.sidecar.native (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "sidecar.native needs Kubernetes >= 1.29 (native sidecar containers), this is %s: set sidecar.native=false" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- with (.Values.schedule | default dict).spec }}
{{- if ne ($.Values.mode | default "sidecar") "run" }}
{{- fail (printf "schedule.spec (%q) needs mode run: a schedule is `elector run --schedule`, which runs the command on the leader; in sidecar mode every replica runs the app, which decides itself: set mode=run, or leave schedule.spec empty" .) }}
{{- end }}
{{- end }}
{{- if and .Values.redis.tls.clientCertSecret (not .Values.redis.tls.enabled) }}
{{- fail "redis.tls.clientCertSecret needs redis.tls.enabled" }}
{{- end }}
{{- if and .Values.redis.tls.caSecret (not .Values.redis.tls.enabled) }}
{{- fail "redis.tls.caSecret needs redis.tls.enabled" }}
{{- end }}
{{- $duration := include "elector.durationNanos" .Values.lease.duration | int64 }}
{{- $renew := include "elector.durationNanos" .Values.lease.renewDeadline | int64 }}
{{- $retry := include "elector.durationNanos" .Values.lease.retryPeriod | int64 }}
{{- if not (gt $duration $renew) }}
{{- fail (printf "lease.duration (%s) must be longer than lease.renewDeadline (%s)" .Values.lease.duration .Values.lease.renewDeadline) }}
{{- end }}
{{- /* renewDeadline > 1.2 × retryPeriod, as client-go and the CLI require (retries are jittered by up to 20%) */}}
{{- if not (gt (mul $renew 5) (mul $retry 6)) }}
{{- fail (printf "lease.renewDeadline (%s) must be longer than 1.2 × lease.retryPeriod (%s): retries are jittered by up to 20%%" .Values.lease.renewDeadline .Values.lease.retryPeriod) }}
{{- end }}
{{- end }}
