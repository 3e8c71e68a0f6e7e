{{/*
The provider sidecar: a regular container, or with
provider.nativeSidecar an init container with restartPolicy Always
(Kubernetes 1.29+), which starts before the controller and stops after it.
*/}}
{{- define "ccm-rs.provider" -}}
- name: provider
  image: {{ .Values.provider.image }}
  imagePullPolicy: {{ .Values.provider.imagePullPolicy }}
  args:
    - --endpoint=unix:///var/run/cloud-provider/provider.sock
    {{- range .Values.provider.args }}
    - {{ . | quote }}
    {{- end }}
  {{- with .Values.provider.env }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .Values.provider.credentialsSecret }}
  envFrom:
    - secretRef:
        name: {{ .Values.provider.credentialsSecret }}
  {{- end }}
  # The kubelet cannot probe a Unix socket: the controller relays
  # the provider's grpc.health.v1 on its secure port (same pod
  # network). A controller down for 30 s restarts the provider too.
  livenessProbe:
    httpGet:
      path: /livez/provider
      port: {{ .Values.controller.securePort }}
      scheme: HTTPS
    initialDelaySeconds: 15
    periodSeconds: 10
    timeoutSeconds: 3
    failureThreshold: 3
  resources:
    {{- toYaml .Values.provider.resources | nindent 4 }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: provider-socket
      mountPath: /var/run/cloud-provider
    {{- with .Values.provider.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if .Values.provider.nativeSidecar }}
  restartPolicy: Always
  {{- end }}
{{- end }}
