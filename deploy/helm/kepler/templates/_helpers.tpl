{{/* The chart's name, shortened to a DNS label. */}}
{{- define "kepler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's object name: fullnameOverride, else the release name when it already holds the
chart name, else "<release>-<chart>". 63 characters at most (a DNS label).
*/}}
{{- define "kepler.fullname" -}}
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

{{- define "kepler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object: the selector labels (which win: changing them would orphan the pods),
then `labels` from the values, then the chart's own. A map, so no key is written twice.
*/}}
{{- define "kepler.labels" -}}
{{- $own := dict "helm.sh/chart" (include "kepler.chart" .) "app.kubernetes.io/version" .Chart.AppVersion "app.kubernetes.io/managed-by" .Release.Service "app.kubernetes.io/part-of" "kepler" }}
{{- $selector := include "kepler.selectorLabels" . | fromYaml }}
{{- toYaml (merge (dict) $selector (default (dict) .Values.labels) $own) }}
{{- end }}

{{/* The agent pods' labels: the selector labels, then `labels` from the values. */}}
{{- define "kepler.podLabels" -}}
{{- $selector := include "kepler.selectorLabels" . | fromYaml }}
{{- toYaml (merge (dict) $selector (default (dict) .Values.labels)) }}
{{- end }}

{{- define "kepler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kepler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kepler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kepler.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* namespace.create puts everything in namespace.name; otherwise the release's namespace. */}}
{{- define "kepler.namespace" -}}
{{- if .Values.namespace.create }}
{{- default (include "kepler.name" .) .Values.namespace.name }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/* The agent's web config is written by the chart when tls.enabled. */}}
{{- define "kepler.webConfigName" -}}
{{- printf "%s-web-config" (include "kepler.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kepler.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "kepler.fullname" .) | trunc 63 | trimSuffix "-") .Values.tls.existingSecret }}
{{- end }}

{{- define "kepler.modelServerName" -}}
{{- printf "%s-model-server" (include "kepler.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
A probe from the values (dict in .probe), adapted to the agent's web config: HTTPS when TLS is
on; a TCP check when basic auth is on, since the agent guards every path (probes included)
and a probe cannot carry a password without writing it into the pod spec.
*/}}
{{- define "kepler.probe" -}}
{{- $probe := deepCopy .probe }}
{{- if and .root.Values.tls.enabled $probe.httpGet }}
{{- if .root.Values.tls.basicAuthUsers }}
{{- $port := $probe.httpGet.port }}
{{- $_ := unset $probe "httpGet" }}
{{- $_ := set $probe "tcpSocket" (dict "port" $port) }}
{{- else }}
{{- $_ := set $probe.httpGet "scheme" "HTTPS" }}
{{- end }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/* Distinct from the agent's, so neither the DaemonSet nor its Service selects these pods. */}}
{{- define "kepler.modelServerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "kepler.name" . }}-model-server
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The agent's config file: `config` from the values as written, plus the model server's URL when
the chart deploys one and `config.estimator.modelServerURL` is not set.
*/}}
{{- define "kepler.config" -}}
{{- $config := deepCopy .Values.config }}
{{- if and .Values.modelServer.enabled (not (dig "estimator" "modelServerURL" "" $config)) }}
{{- $estimator := default (dict) $config.estimator }}
{{- $url := printf "http://%s.%s.svc:%v" (include "kepler.modelServerName" .) (include "kepler.namespace" .) .Values.modelServer.port }}
{{- $_ := set $estimator "modelServerURL" $url }}
{{- $_ := set $config "estimator" $estimator }}
{{- end }}
{{- toYaml $config }}
{{- end }}
