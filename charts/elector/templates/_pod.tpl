{{/*
The pod template of the workload (Deployment or StatefulSet): the app, the
elector (a sidecar, or `elector run` wrapping the app's command), their
volumes and the pod's scheduling.
*/}}
{{- define "elector.podTemplate" -}}
{{- $argv := include "elector.appArgv" . | fromJson }}
{{- $appSecurityContext := include "elector.appSecurityContext" . }}
metadata:
  labels:
    {{- include "elector.labels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    kubectl.kubernetes.io/default-container: {{ .Values.app.name }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "elector.serviceAccountName" . }}
  automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
  # Service links would put variables such as ELECTOR_PORT (from a Service
  # named "elector") into the environment, where the elector reads its
  # ELECTOR_* settings.
  enableServiceLinks: false
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.podSecurityContext | nindent 4 }}
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  {{- if eq .Values.mode "run" }}
  initContainers:
    {{- with .Values.initContainers }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    # The image is distroless (no cp): the binary copies itself into the
    # shared volume, from where the app container runs it.
    - name: install-elector
      image: {{ include "elector.image" . }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - install
        - {{ include "elector.binDir" . }}/elector
      securityContext:
        {{- toYaml .Values.securityContext | nindent 8 }}
      {{- with .Values.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - name: elector-bin
          mountPath: {{ include "elector.binDir" . }}
  containers:
    - name: {{ .Values.app.name }}
      image: {{ include "elector.appImage" . }}
      imagePullPolicy: {{ .Values.app.image.pullPolicy }}
      command:
        - {{ include "elector.binDir" . }}/elector
      args:
        - run
        - --http-addr=:{{ .Values.http.port }}
        {{- include "elector.commonArgs" . | trim | nindent 8 }}
        - --kill-grace={{ .Values.run.killGrace }}
        - --stop-signal={{ .Values.run.stopSignal }}
        {{- if .Values.run.exitOnLost }}
        - --exit-on-lost
        {{- end }}
        {{- with include "elector.scheduleArgs" . | trim }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- with .Values.run.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        - --
        {{- toYaml $argv.command | nindent 8 }}
        {{- with $argv.args }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      env:
        {{- include "elector.env" . | trim | nindent 8 }}
        {{- with .Values.app.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .Values.app.envFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      ports:
        {{- include "elector.httpPort" . | nindent 8 }}
        {{- with .Values.app.ports }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- include "elector.probes" . | trim | nindent 6 }}
      {{- with .Values.app.lifecycle }}
      lifecycle:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $appSecurityContext }}
      securityContext:
        {{- . | nindent 8 }}
      {{- end }}
      {{- with .Values.app.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - name: elector-bin
          mountPath: {{ include "elector.binDir" . }}
          readOnly: true
        {{- with include "elector.volumeMounts" . | trim }}
        {{- . | nindent 8 }}
        {{- end }}
        {{- with .Values.app.volumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  {{- else }}
  {{- if or .Values.sidecar.native .Values.initContainers }}
  initContainers:
    {{- with .Values.initContainers }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- with include "elector.nativeSidecar" . | trim }}
    {{- . | nindent 4 }}
    {{- end }}
  {{- end }}
  containers:
    - name: {{ .Values.app.name }}
      image: {{ include "elector.appImage" . }}
      imagePullPolicy: {{ .Values.app.image.pullPolicy }}
      {{- with $argv.command }}
      command:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $argv.args }}
      args:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      env:
        {{- include "elector.appEnv" . | trim | nindent 8 }}
        {{- with .Values.app.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with .Values.app.envFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.app.ports }}
      ports:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.app.startupProbe }}
      startupProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.app.livenessProbe }}
      livenessProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.app.readinessProbe }}
      readinessProbe:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .Values.app.lifecycle }}
      lifecycle:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $appSecurityContext }}
      securityContext:
        {{- . | nindent 8 }}
      {{- end }}
      {{- with .Values.app.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        {{- include "elector.appVolumeMounts" . | trim | nindent 8 }}
        {{- with .Values.app.volumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    {{- with include "elector.plainSidecar" . | trim }}
    {{- . | nindent 4 }}
    {{- end }}
  {{- end }}
    {{- with .Values.extraContainers }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  volumes:
    {{- include "elector.volumes" . | trim | nindent 4 }}
    {{- with .Values.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- include "elector.topologySpreadConstraints" . | nindent 4 }}
  {{- end }}
{{- end }}
