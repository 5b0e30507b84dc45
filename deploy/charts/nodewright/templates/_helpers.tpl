{{/* The release's base name: <release>-nodewright unless the release is already called that, or overridden. */}}
{{- define "nodewright.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "nodewright.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "nodewright.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "nodewright.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component (controller or worker): pass (dict "root" $ "component" "controller"). */}}
{{- define "nodewright.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nodewright.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The ServiceAccount both Deployments run as. */}}
{{- define "nodewright.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nodewright.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The bootstrap token Secret's namespace and name, from settings.bootstrapTokenSecret ("<namespace>/<name>"). */}}
{{- define "nodewright.bootstrapTokenNamespace" -}}
{{- $parts := splitList "/" (required "settings.bootstrapTokenSecret is required (<namespace>/<name>)" .Values.settings.bootstrapTokenSecret) -}}
{{- if ne (len $parts) 2 -}}{{- fail "settings.bootstrapTokenSecret must be <namespace>/<name>" -}}{{- end -}}
{{- index $parts 0 -}}
{{- end -}}

{{- define "nodewright.bootstrapTokenName" -}}
{{- index (splitList "/" .Values.settings.bootstrapTokenSecret) 1 -}}
{{- end -}}

{{/* The Secrets of rotated bootstrap tokens: core.bootstrap_tokens.ROTATED_TOKEN_IDS, as the API server names them. */}}
{{- define "nodewright.rotatedTokenSecrets" -}}
{{- list "bootstrap-token-nwrot0" "bootstrap-token-nwrot1" "bootstrap-token-nwrot2" | toJson -}}
{{- end -}}
