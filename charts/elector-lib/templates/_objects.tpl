{{/*
The objects and pod parts a chart needs to run the elector sidecar next to
its app. Each takes the context described in README.md (Values: the elector's
values; Release, Chart, Capabilities: the including chart's; optionally
SelectorLabels and ServiceAccountName) and renders nothing when its feature is
off.
*/}}

{{/*
The elector's volumes, as list items of the pod's volumes: its status
directory (sidecar mode; elector-bin in run mode), the Redis credentials, its
own API token (leaderLabel, events, mirrorLease) and the resign token.
*/}}
{{- define "elector.volumes" -}}
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
{{- if eq (.Values.mode | default "sidecar") "run" }}
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
{{ . }}
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
{{- end }}

{{/*
The app container's environment (list items): where it learns whether it
leads.
*/}}
{{- define "elector.appEnv" -}}
- name: ELECTOR_LEADER_URL
  value: http://127.0.0.1:{{ .Values.http.port }}/leader
- name: ELECTOR_STATUS_FILE
  value: {{ include "elector.statusFile" . }}
{{- end }}

{{/*
The app container's volume mounts (list items): the status file, read-only.
*/}}
{{- define "elector.appVolumeMounts" -}}
- name: elector-status
  mountPath: {{ include "elector.statusDir" . }}
  readOnly: true
{{- end }}

{{/*
The sidecar as an item of initContainers when sidecar.native (nothing
otherwise), and as an item of containers when not: include both, each in its
list.
*/}}
{{- define "elector.nativeSidecar" -}}
{{- if .Values.sidecar.native }}
{{- include "elector.sidecarContainer" . }}
{{- end }}
{{- end }}

{{- define "elector.plainSidecar" -}}
{{- if not .Values.sidecar.native }}
{{- include "elector.sidecarContainer" . }}
{{- end }}
{{- end }}

{{/*
The Role and RoleBinding of the features that use the Kubernetes API
(leaderLabel, events, mirrorLease), when rbac.create: a manifest, or nothing.
*/}}
{{- define "elector.rbac" -}}
{{- if and .Values.rbac.create (include "elector.kubeAPI" .) }}
{{- if and (not .ServiceAccountName) (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) }}
{{- fail "rbac.create: leaderLabel, events and mirrorLease need a Role, and with serviceAccount.create=false it would be bound to the namespace's \"default\" ServiceAccount, which every pod without one of its own runs as: name the ServiceAccount to bind it to (serviceAccount.name), set serviceAccount.create=true, or set rbac.create=false and bring your own" }}
{{- end }}
# Least privilege for what is enabled: RBAC cannot name the pod (its name is
# known only once it exists), so `patch` covers the namespace's pods;
# docs/KUBERNETES.md says what that allows and how to narrow it further.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ include "elector.fullname" . }}
  labels:
    {{- include "elector.labels" . | nindent 4 }}
rules:
  {{- if .Values.leaderLabel.enabled }}
  # The leader label on the elector's own pod (a JSON merge patch).
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["patch"]
  {{- end }}
  {{- if .Values.events.enabled }}
  # BecameLeader / StoppedLeading Events; patch counts a repeat.
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["create", "patch"]
  {{- end }}
  {{- if .Values.mirrorLease.enabled }}
  # The informational mirror Lease, which the chart creates: only it, by name.
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    resourceNames: [{{ include "elector.fullname" . | quote }}]
    verbs: ["get", "patch"]
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ include "elector.fullname" . }}
  labels:
    {{- include "elector.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "elector.fullname" . }}
subjects:
  - kind: ServiceAccount
    name: {{ include "elector.serviceAccountName" . }}
    namespace: {{ .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
The Service in front of every replica's /metrics, when metrics.service.enabled.
*/}}
{{- define "elector.metricsService" -}}
{{- if .Values.metrics.service.enabled }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "elector.fullname" . }}-metrics
  labels:
    {{- include "elector.labels" . | nindent 4 }}
    app.kubernetes.io/component: metrics
  {{- with .Values.metrics.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ .Values.metrics.service.type }}
  # Every replica has metrics, followers too, which are NotReady under
  # gateReadiness.
  publishNotReadyAddresses: true
  selector:
    {{- include "elector.selectorLabels" . | nindent 4 }}
  ports:
    - name: http-elector
      port: {{ .Values.metrics.service.port }}
      targetPort: http-elector
      protocol: TCP
{{- end }}
{{- end }}

{{/*
The informational mirror Lease, when mirrorLease.enabled.
*/}}
{{- define "elector.mirrorLease" -}}
{{- if .Values.mirrorLease.enabled }}
# Informational: the leader's elector writes holderIdentity, acquireTime,
# renewTime and leaseTransitions here (--mirror-lease) so that
# `kubectl get lease` shows who leads. The election runs on Redis and never
# reads this object.
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: {{ include "elector.fullname" . }}
  labels:
    {{- include "elector.labels" . | nindent 4 }}
spec: {}
{{- end }}
{{- end }}
