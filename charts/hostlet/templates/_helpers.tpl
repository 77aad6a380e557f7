{{/* Name prefix of the cluster-scoped objects of this release. */}}
{{- define "hostlet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hostlet.labels" -}}
app.kubernetes.io/name: hostlet
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
hostlet.token is the bootstrap token "<id>.<secret>": the value given, else
the one this release created before (so upgrades keep it), else a new one.
Computed once per render and kept in .Values, so the Secret and NOTES agree.
*/}}
{{- define "hostlet.token" -}}
{{- if not (hasKey .Values "__token") -}}
{{- $token := .Values.bootstrapToken.token -}}
{{- if not $token -}}
{{- range (lookup "v1" "Secret" "kube-system" "").items -}}
{{- $l := .metadata.labels | default dict -}}
{{- if and (eq (.type | default "") "bootstrap.kubernetes.io/token") (eq (get $l "app.kubernetes.io/name") "hostlet") (eq (get $l "app.kubernetes.io/instance") $.Release.Name) -}}
{{- $token = printf "%s.%s" (index .data "token-id" | b64dec) (index .data "token-secret" | b64dec) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $token -}}
{{- $token = printf "%s.%s" (randAlphaNum 6 | lower) (randAlphaNum 16 | lower) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]{6}\\.[a-z0-9]{16}$" $token) -}}
{{- fail "bootstrapToken.token must look like <6 of [a-z0-9]>.<16 of [a-z0-9]>" -}}
{{- end -}}
{{- $_ := set .Values "__token" $token -}}
{{- end -}}
{{- get .Values "__token" -}}
{{- end -}}

{{/* hostlet.clusterInfo is the existing kube-public/cluster-info (a map, empty if none). */}}
{{- define "hostlet.existingClusterInfo" -}}
{{- toYaml (lookup "v1" "ConfigMap" "kube-public" "cluster-info") -}}
{{- end -}}

{{/*
hostlet.createClusterInfo is "true" when this release creates (or already
owns) kube-public/cluster-info.
*/}}
{{- define "hostlet.createClusterInfo" -}}
{{- $ci := include "hostlet.existingClusterInfo" . | fromYaml -}}
{{- $owner := "" -}}
{{- if $ci.metadata -}}
{{- $owner = get ($ci.metadata.annotations | default dict) "meta.helm.sh/release-name" -}}
{{- end -}}
{{- if and .Values.clusterInfo.create (or (not $ci.metadata) (eq $owner .Release.Name)) -}}true{{- end -}}
{{- end -}}

{{/* hostlet.server is the API server URL hosts join: the value, else the existing cluster-info's. */}}
{{- define "hostlet.server" -}}
{{- if .Values.clusterInfo.server -}}
{{- .Values.clusterInfo.server -}}
{{- else -}}
{{- $ci := include "hostlet.existingClusterInfo" . | fromYaml -}}
{{- if $ci.data -}}
{{- $kc := index $ci.data "kubeconfig" | fromYaml -}}
{{- range $kc.clusters -}}{{- .cluster.server -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
hostlet.clusterDNS is the cluster DNS servers as a YAML list: the values',
else the cluster IPs of the DNS Service (empty where there is none, or no
cluster to look in as under helm template).
*/}}
{{- define "hostlet.clusterDNS" -}}
{{- $servers := .Values.clusterDNS.servers | default list -}}
{{- if not $servers -}}
{{- $svc := lookup "v1" "Service" "kube-system" .Values.clusterDNS.service -}}
{{- if $svc -}}
{{- range ($svc.spec.clusterIPs | default (list $svc.spec.clusterIP)) -}}
{{- if and . (ne . "None") -}}{{- $servers = append $servers . -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $servers -}}
{{- end -}}
