{{/*
The elector sidecar container (sidecar mode): a native sidecar in
initContainers, or a plain container next to the app.
*/}}
{{- define "elector.sidecarContainer" -}}
- name: elector
  image: {{ include "elector.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if .Values.sidecar.native }}
  # A native sidecar: started before the app, stopped after it.
  restartPolicy: Always
  {{- end }}
  args:
    - sidecar
    - --http-addr=:{{ .Values.http.port }}
    - --status-file={{ include "elector.statusFile" . }}
    {{- include "elector.commonArgs" . | trim | nindent 4 }}
    {{- with .Values.sidecar.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  env:
    {{- include "elector.env" . | trim | nindent 4 }}
  ports:
    {{- include "elector.httpPort" . | nindent 4 }}
  {{- include "elector.probes" . | trim | nindent 2 }}
  {{- with .Values.sidecar.lifecycle }}
  lifecycle:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  {{- with .Values.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: elector-status
      mountPath: {{ include "elector.statusDir" . }}
    {{- with include "elector.volumeMounts" . | trim }}
    {{- . | nindent 4 }}
    {{- end }}
{{- end }}
