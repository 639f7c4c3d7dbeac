{{/* Names and labels shared by the templates. */}}
{{- define "obleth.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "obleth.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "obleth.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret and key holding the admin token. */}}
{{- define "obleth.adminSecret" -}}
{{- .Values.adminToken.existingSecret | default (printf "%s-admin" (include "obleth.fullname" .)) -}}
{{- end -}}
{{- define "obleth.adminSecretKey" -}}
{{- if .Values.adminToken.existingSecret -}}{{ .Values.adminToken.existingSecretKey }}{{- else -}}admin-token{{- end -}}
{{- end -}}
