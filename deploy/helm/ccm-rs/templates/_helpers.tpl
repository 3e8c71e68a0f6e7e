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
The provider sidecar of one provider: a regular container, or with
nativeSidecar an init container with restartPolicy Always (Kubernetes
1.29+), which starts before the controller and stops after it. A dict:
  root       the chart's root context
  p          the provider's values (provider, or an entry of providers,
             whose resources default to provider.resources)
  container  the container's name
  image      the image reference
  socket     the socket's file name in the shared directory
  probePath  the controller's path relaying the provider's health
  accessKey  the clusterAccess value's name, for a comment
*/}}
{{- define "ccm-rs.providerContainer" -}}
{{- $root := .root -}}
{{- $p := .p -}}
{{- $access := dig "clusterAccess" "enabled" false $p -}}
{{- $probe := $p.livenessProbe | default dict -}}
- name: {{ .container }}
  image: {{ .image | quote }}
  imagePullPolicy: {{ $p.image.pullPolicy | default "IfNotPresent" }}
  args:
    - {{ printf "--endpoint=unix:///var/run/cloud-provider/%s" .socket | quote }}
    {{- range $p.args }}
    - {{ . | quote }}
    {{- end }}
  {{- if or $access $p.extraEnv }}
  env:
    {{- if $access }}
    # The kubeconfig the controller writes ({{ .accessKey }}).
    - name: KUBECONFIG
      value: {{ printf "%s/kubeconfig" (include "ccm-rs.providerAccessDir" $root) | quote }}
    {{- end }}
    {{- with $p.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
  {{- if $p.credentialsSecret }}
  envFrom:
    - secretRef:
        name: {{ $p.credentialsSecret | quote }}
  {{- end }}
  # The kubelet cannot probe a Unix socket: the controller relays
  # the provider's grpc.health.v1 on its secure port (same pod
  # network). A controller down for 30 s restarts the provider too.
  livenessProbe:
    httpGet:
      path: {{ .probePath }}
      port: {{ $root.Values.controller.securePort }}
      scheme: HTTPS
    initialDelaySeconds: {{ ternary $probe.initialDelaySeconds 15 (hasKey $probe "initialDelaySeconds") }}
    periodSeconds: {{ ternary $probe.periodSeconds 10 (hasKey $probe "periodSeconds") }}
    timeoutSeconds: {{ ternary $probe.timeoutSeconds 3 (hasKey $probe "timeoutSeconds") }}
    failureThreshold: {{ ternary $probe.failureThreshold 3 (hasKey $probe "failureThreshold") }}
  {{- with $p.resources | default $root.Values.provider.resources }}
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
    {{- if $access }}
    - name: provider-cluster-access
      mountPath: {{ include "ccm-rs.providerAccessDir" $root }}
      readOnly: true
    {{- end }}
    {{- with $p.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if $p.nativeSidecar }}
  restartPolicy: Always
  {{- end }}
{{- end }}

{{/*
The one provider (provider): container "provider" on provider.sock.
*/}}
{{- define "ccm-rs.provider" -}}
{{- include "ccm-rs.providerContainer" (dict "root" . "p" .Values.provider "container" "provider" "image" (include "ccm-rs.providerImage" .) "socket" "provider.sock" "probePath" "/livez/provider" "accessKey" "provider.clusterAccess") -}}
{{- end }}

{{/*
The sidecars of providers (hybrid mode) that are (native "true") or are
not (native "") native sidecars: container provider-<name> on <name>.sock,
its liveness through the controller's /livez/provider:<name>.
*/}}
{{- define "ccm-rs.hybridProviders" -}}
{{- $root := .root -}}
{{- range $root.Values.providers }}
{{- if eq (ternary "true" "" (dig "nativeSidecar" false .)) $.native }}
{{ include "ccm-rs.providerContainer" (dict "root" $root "p" . "container" (printf "provider-%s" .name) "image" (include "ccm-rs.image" (list .image $root)) "socket" (printf "%s.sock" .name) "probePath" (printf "/livez/provider:%s" .name) "accessKey" "providers[].clusterAccess") }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"true" in hybrid mode: providers (a list) is given, and replaces provider.
*/}}
{{- define "ccm-rs.hybrid" -}}
{{- if .Values.providers -}}true{{- end -}}
{{- end }}

{{/*
"true" when a provider has cluster access: provider.clusterAccess.enabled,
or in hybrid mode any entry's clusterAccess.enabled (they share the one
provider ServiceAccount and kubeconfig).
*/}}
{{- define "ccm-rs.providerAccess" -}}
{{- if include "ccm-rs.hybrid" . -}}
{{- range .Values.providers -}}
{{- if dig "clusterAccess" "enabled" false . -}}true{{- end -}}
{{- end -}}
{{- else if .Values.provider.clusterAccess.enabled -}}
true
{{- end -}}
{{- end }}

{{/*
The default provider of hybrid mode: defaultProvider when given ("" for
none), else the first entry's name.
*/}}
{{- define "ccm-rs.defaultProvider" -}}
{{- if kindIs "invalid" .Values.defaultProvider -}}
{{- (index .Values.providers 0).name -}}
{{- else -}}
{{- .Values.defaultProvider -}}
{{- end -}}
{{- end }}

{{/*
Hybrid mode's guards: providers and provider are alternatives, names are
unique, defaultProvider names an entry (and is given only with
providers), volume names are unique.
*/}}
{{- define "ccm-rs.checkProviders" -}}
{{- if include "ccm-rs.hybrid" . -}}
{{- $p := .Values.provider | default dict -}}
{{- $set := list -}}
{{- range $k := list "repository" "tag" "digest" -}}
{{- if dig "image" $k "" $p -}}{{- $set = append $set (printf "provider.image.%s" $k) -}}{{- end -}}
{{- end -}}
{{- range $k := list "args" "extraEnv" "credentialsSecret" "extraVolumeMounts" "nativeSidecar" -}}
{{- if index $p $k -}}{{- $set = append $set (printf "provider.%s" $k) -}}{{- end -}}
{{- end -}}
{{- if dig "clusterAccess" "enabled" false $p -}}{{- $set = append $set "provider.clusterAccess.enabled" -}}{{- end -}}
{{- with $set -}}
{{- fail (printf "providers and provider are alternatives: providers (a list, several providers) replaces provider (one provider), but %s is set too; move it into an entry of providers or leave providers empty" (join ", " .)) -}}
{{- end -}}
{{- $names := list -}}
{{- range .Values.providers -}}
{{- if has .name $names -}}
{{- fail (printf "providers: the name %q is given twice" .name) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- $default := include "ccm-rs.defaultProvider" . -}}
{{- if and $default (not (has $default $names)) -}}
{{- fail (printf "defaultProvider %q names no entry of providers (%s); set it empty for no default provider" $default (join ", " $names)) -}}
{{- end -}}
{{- $volumes := list "kube-api-access" "provider-socket" "provider-cluster-access" -}}
{{- range (concat .Values.extraVolumes (include "ccm-rs.providerVolumes" . | fromYamlArray)) -}}
{{- if has .name $volumes -}}
{{- fail (printf "the volume name %q is used twice (extraVolumes, providers[].extraVolumes, or a volume of the chart)" .name) -}}
{{- end -}}
{{- $volumes = append $volumes .name -}}
{{- end -}}
{{- else if not (kindIs "invalid" .Values.defaultProvider) -}}
{{- fail "defaultProvider is only for providers (several providers); with provider (one provider) it is that one" -}}
{{- end -}}
{{- end }}

{{/*
The volumes of every entry of providers (providers[].extraVolumes), as a
YAML list.
*/}}
{{- define "ccm-rs.providerVolumes" -}}
{{- $all := list -}}
{{- range .Values.providers -}}
{{- $all = concat $all (.extraVolumes | default list) -}}
{{- end -}}
{{- toYaml $all -}}
{{- end }}

{{/*
The controller's flags naming the providers in hybrid mode: one
--provider per entry (its socket in the shared directory), the default
provider, and each entry's routing flags when the entry sets them.
*/}}
{{- define "ccm-rs.hybridArgs" -}}
{{- range .Values.providers }}
- {{ printf "--provider=%s=unix:///var/run/cloud-provider/%s.sock" .name .name | quote }}
{{- end }}
- {{ printf "--default-provider=%s" (include "ccm-rs.defaultProvider" .) | quote }}
{{- range .Values.providers }}
{{- if .nodeSelector }}
- {{ printf "--provider-node-selector=%s=%s" .name .nodeSelector | quote }}
{{- end }}
{{- if .platforms }}
- {{ printf "--cloud-provider-platforms=%s=%s" .name (join "," .platforms) | quote }}
{{- end }}
{{- if .loadBalancerBackends }}
- {{ printf "--provider-load-balancer-backends=%s=%s" .name .loadBalancerBackends | quote }}
{{- end }}
{{- if hasKey . "routes" }}
- {{ printf "--provider-routes=%s=%t" .name .routes | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The paths the secure port serves without a token: the probes', each
provider's liveness included.
*/}}
{{- define "ccm-rs.alwaysAllowPaths" -}}
{{- if include "ccm-rs.hybrid" . -}}
{{- $paths := list "/healthz" "/readyz" "/livez" -}}
{{- range .Values.providers -}}
{{- $paths = append $paths (printf "/livez/provider:%s" .name) -}}
{{- end -}}
{{- join "," $paths -}}
{{- else -}}
/healthz,/readyz,/livez,/livez/provider
{{- end -}}
{{- end }}
