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
    {{- if .Values.sidecar.native }}
    {{- include "elector.sidecarContainer" . | nindent 4 }}
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
        - name: ELECTOR_LEADER_URL
          value: http://127.0.0.1:{{ .Values.http.port }}/leader
        - name: ELECTOR_STATUS_FILE
          value: {{ include "elector.statusFile" . }}
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
        - name: elector-status
          mountPath: {{ include "elector.statusDir" . }}
          readOnly: true
        {{- with .Values.app.volumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    {{- if not .Values.sidecar.native }}
    {{- include "elector.sidecarContainer" . | nindent 4 }}
    {{- end }}
  {{- end }}
    {{- with .Values.extraContainers }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  volumes:
    {{- if include "elector.kubeAPI" . }}
    # The elector's own token for the leader label and the Events: mounted
    # in its container only, refreshed by the kubelet (the elector reads it
    # for every request).
    - name: elector-kube-api
      projected:
        defaultMode: 0444
        sources:
          - serviceAccountToken:
              path: token
              expirationSeconds: 3607
          - configMap:
              name: kube-root-ca.crt
              items:
                - key: ca.crt
                  path: ca.crt
          - downwardAPI:
              items:
                - path: namespace
                  fieldRef:
                    apiVersion: v1
                    fieldPath: metadata.namespace
    {{- end }}
    {{- if eq .Values.mode "run" }}
    - name: elector-bin
      emptyDir:
        sizeLimit: 128Mi
    {{- else }}
    - name: elector-status
      emptyDir:
        medium: Memory
        sizeLimit: 1Mi
    {{- end }}
    {{- with include "elector.redisVolumes" . | trim }}
    {{- . | nindent 4 }}
    {{- end }}
    {{- with .Values.resign.tokenSecret }}
    # The token of POST /resign (--resign-token-file), in the container
    # that runs the elector only.
    - name: resign-token
      projected:
        defaultMode: 0440
        sources:
          - secret:
              name: {{ . }}
              items:
                - key: {{ $.Values.resign.tokenSecretKey }}
                  path: token
    {{- end }}
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
