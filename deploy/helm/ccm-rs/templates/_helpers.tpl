{{/*
The name of the application: app.kubernetes.io/name, and the default of
every object's name. A cloud-controller-manager is one per cluster, so
objects are not prefixed with the release name (as upstream cloud
providers' charts do): the defaults give the names deploy/base uses.
*/}}
{{- define "ccm-rs.name" -}}
{{- default "cloud-controller-manager" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/*
The name of the workload, the ServiceAccount and the other namespaced
objects.
*/}}
{{- define "ccm-rs.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- include "ccm-rs.name" . -}}
{{- end -}}
{{- end }}

{{/*
The prefix of the cluster-scoped RBAC objects and the leader-election
Role: ccm-rs:<fullname>.
*/}}
{{- define "ccm-rs.rbacName" -}}
{{- printf "ccm-rs:%s" (include "ccm-rs.fullname" .) -}}
{{- end }}

{{- define "ccm-rs.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/*
What selects the pods: the workload's selector, the Service's, the
anti-affinity's and the PodDisruptionBudget's.
*/}}
{{- define "ccm-rs.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ccm-rs.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The labels of every object.
*/}}
{{- define "ccm-rs.labels" -}}
helm.sh/chart: {{ include "ccm-rs.chart" . }}
{{ include "ccm-rs.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ccm-rs
{{- end }}

{{- define "ccm-rs.serviceAccountName" -}}
{{- default (include "ccm-rs.fullname" .) .Values.serviceAccount.name -}}
{{- end }}

{{/*
The provider's own ServiceAccount (provider.clusterAccess.enabled).
*/}}
{{- define "ccm-rs.providerServiceAccountName" -}}
{{- printf "%s-provider" (include "ccm-rs.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/*
Where the controller writes the provider's token, ca.crt and kubeconfig
(provider.clusterAccess.enabled), in both containers.
*/}}
{{- define "ccm-rs.providerAccessDir" -}}
/var/run/provider-cluster-access
{{- end }}

{{- define "ccm-rs.metricsServiceName" -}}
{{- printf "%s-metrics" (include "ccm-rs.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/*
An image reference from {repository, tag, digest}: repository@digest when
a digest is given, else repository:tag with the tag defaulting to the
chart's appVersion.
*/}}
{{- define "ccm-rs.image" -}}
{{- $image := index . 0 -}}
{{- $root := index . 1 -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end }}

{{/*
The provider's image. The chart has no default: the wrong provider on a
real cluster (the fake one would stamp fake:// providerIDs, which are
immutable, on real Nodes) is worse than no install.
*/}}
{{- define "ccm-rs.providerImage" -}}
{{- $_ := required "provider.image.repository is required: the image of your cloud's provider sidecar (e.g. --set provider.image.repository=registry.example.com/my-cloud-provider --set provider.image.tag=1.0.0; for a test cluster ghcr.io/ccm-rs/fake-provider). See the chart's README.md" .Values.provider.image.repository -}}
{{- include "ccm-rs.image" (list .Values.provider.image .) -}}
{{- end }}

{{/*
The --controllers list: controller.controllers, plus pv-label when
controller.pvLabels.enabled. Empty when that is the default ("*").
*/}}
{{- define "ccm-rs.controllers" -}}
{{- $list := .Values.controller.controllers -}}
{{- $on := or (has "pv-label" $list) (has "pv-label-controller" $list) -}}
{{- $off := or (has "-pv-label" $list) (has "-pv-label-controller" $list) -}}
{{- if .Values.controller.pvLabels.enabled -}}
{{- if $off -}}
{{- fail "controller.controllers disables pv-label while controller.pvLabels.enabled is true" -}}
{{- end -}}
{{- if not $on -}}
{{- $list = append $list "pv-label" -}}
{{- end -}}
{{- else if $on -}}
{{- fail "controller.controllers names pv-label: set controller.pvLabels.enabled=true instead, which also grants its RBAC" -}}
{{- end -}}
{{- if ne (join "," $list) "*" -}}
{{- join "," $list -}}
{{- end -}}
{{- end }}

{{/*
The PromQL matchers of the controller's series, for the alerts.
*/}}
{{- define "ccm-rs.alertSelector" -}}
{{- if .Values.metrics.prometheusRule.selector -}}
{{- .Values.metrics.prometheusRule.selector -}}
{{- else -}}
{{- printf "job=%q, namespace=%q" (include "ccm-rs.metricsServiceName" .) .Release.Namespace -}}
{{- end -}}
{{- end }}

{{/*
The provider sidecar: a regular container, or with
provider.nativeSidecar an init container with restartPolicy Always
(Kubernetes 1.29+), which starts before the controller and stops after it.
*/}}
{{- define "ccm-rs.provider" -}}
- name: provider
  image: {{ include "ccm-rs.providerImage" . | quote }}
  imagePullPolicy: {{ .Values.provider.image.pullPolicy }}
  args:
    - "--endpoint=unix:///var/run/cloud-provider/provider.sock"
    {{- range .Values.provider.args }}
    - {{ . | quote }}
    {{- end }}
  {{- if or .Values.provider.clusterAccess.enabled .Values.provider.extraEnv }}
  env:
    {{- if .Values.provider.clusterAccess.enabled }}
    # The kubeconfig the controller writes (provider.clusterAccess).
    - name: KUBECONFIG
      value: {{ printf "%s/kubeconfig" (include "ccm-rs.providerAccessDir" .) | quote }}
    {{- end }}
    {{- with .Values.provider.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
  {{- if .Values.provider.credentialsSecret }}
  envFrom:
    - secretRef:
        name: {{ .Values.provider.credentialsSecret | quote }}
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
  {{- with .Values.provider.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: provider-socket
      mountPath: /var/run/cloud-provider
    {{- if .Values.provider.clusterAccess.enabled }}
    - name: provider-cluster-access
      mountPath: {{ include "ccm-rs.providerAccessDir" . }}
      readOnly: true
    {{- end }}
    {{- with .Values.provider.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if .Values.provider.nativeSidecar }}
  restartPolicy: Always
  {{- end }}
{{- end }}
