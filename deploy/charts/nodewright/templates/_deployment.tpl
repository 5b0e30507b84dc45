{{/*
One Deployment per component, from one template: the controller and the worker differ only in their arguments,
their replicas and resources, and what only they read (leader election; the shutdown grace).
Call with (dict "root" $ "component" "controller"); a worker that takes one role only also gets "command" (the
nodewright command, when it differs from the component), "role" (its --role) and "values" (its replicas,
resources, env, in place of .Values.<component>).
*/}}

{{/* The image: repository@digest when a digest is given, else repository:tag (tag defaults to appVersion). */}}
{{- define "nodewright.image" -}}
{{- with .Values.image -}}
{{- if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository (default $.Chart.AppVersion .tag) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount's annotations: serviceAccount.annotations plus workload identity's client id. */}}
{{- define "nodewright.serviceAccountAnnotations" -}}
{{- $annotations := deepCopy .Values.serviceAccount.annotations -}}
{{- with include "nodewright.workloadIdentityClientId" . -}}
{{- $_ := set $annotations "azure.workload.identity/client-id" . -}}
{{- end -}}
{{- with $annotations -}}
{{- toYaml . -}}
{{- end -}}
{{- end -}}

{{/* Workload identity's client id, when the worker signs in with workload identity. */}}
{{- define "nodewright.workloadIdentityClientId" -}}
{{- if eq .Values.azure.credential "workloadIdentity" -}}{{ .Values.azure.workloadIdentity.clientId }}{{- end -}}
{{- end -}}

{{/* Pods never run on nodes nodewright manages, and a component's replicas stay on different hosts. */}}
{{- define "nodewright.defaultAffinity" -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "nodewright.selectorLabels" . | fromYaml)) -}}
nodeAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    nodeSelectorTerms:
      - matchExpressions:
          - key: karpenter.sh/nodepool
            operator: DoesNotExist
podAntiAffinity:
{{- if eq .component "controller" }}
  requiredDuringSchedulingIgnoredDuringExecution:
    {{- toYaml (list $term) | nindent 4 }}
{{- else }}
  {{- /* Preferred only: workers scale past the number of nodes. */}}
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        {{- toYaml $term | nindent 8 }}
{{- end }}
{{- end -}}

{{/* topologySpreadConstraints, or a spread over zones; a constraint without a labelSelector gets the component's. */}}
{{- define "nodewright.topologySpreadConstraints" -}}
{{- $selector := dict "matchLabels" (include "nodewright.selectorLabels" . | fromYaml) -}}
{{- $constraints := list -}}
{{- range .root.Values.topologySpreadConstraints -}}
{{- $constraints = append $constraints (merge (deepCopy .) (dict "labelSelector" $selector)) -}}
{{- else -}}
{{- $constraints = list (dict "maxSkew" 1 "topologyKey" "topology.kubernetes.io/zone" "whenUnsatisfiable" (ternary "DoNotSchedule" "ScheduleAnyway" (eq .component "controller")) "labelSelector" $selector) -}}
{{- end -}}
{{- toYaml $constraints -}}
{{- end -}}

{{- define "nodewright.deployment" -}}
{{- $root := .root -}}
{{- $values := .values | default (index $root.Values .component) -}}
{{- $command := .command | default .component -}}
{{- include "nodewright.validate" $root -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "nodewright.fullname" $root }}-{{ .component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nodewright.labels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
  {{- with $root.Values.additionalAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  replicas: {{ $values.replicas }}
  revisionHistoryLimit: {{ $root.Values.revisionHistoryLimit }}
  {{- with $root.Values.strategy }}
  strategy:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "nodewright.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "nodewright.selectorLabels" . | nindent 8 }}
        {{- if include "nodewright.workloadIdentityClientId" $root }}
        azure.workload.identity/use: "true"
        {{- end }}
        {{- with $root.Values.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        {{- /* The workload identity webhook reads the ServiceAccount when a pod is created: roll the pods when it changes. */}}
        checksum/serviceaccount: {{ include "nodewright.serviceAccountAnnotations" $root | sha256sum }}
        {{- with $root.Values.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "nodewright.serviceAccountName" $root }}
      automountServiceAccountToken: true
      {{- /* Without it, a Service called nodewright-metrics would give every pod NODEWRIGHT_METRICS_PORT=tcp://... */}}
      enableServiceLinks: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.podSecurityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.priorityClassName }}
      priorityClassName: {{ . | quote }}
      {{- end }}
      terminationGracePeriodSeconds: {{ $root.Values.terminationGracePeriodSeconds }}
      dnsPolicy: {{ $root.Values.dnsPolicy }}
      nodeSelector:
        {{- toYaml (merge (dict "kubernetes.io/os" "linux") $root.Values.nodeSelector) | nindent 8 }}
      affinity:
        {{- if $root.Values.affinity }}
        {{- toYaml $root.Values.affinity | nindent 8 }}
        {{- else }}
        {{- include "nodewright.defaultAffinity" . | nindent 8 }}
        {{- end }}
      topologySpreadConstraints:
        {{- include "nodewright.topologySpreadConstraints" . | nindent 8 }}
      {{- with $root.Values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "nodewright.image" $root | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args: [{{ $command | quote }}, "--log-format", {{ $root.Values.logFormat | quote }}{{ with .role }}, "--role", {{ . | quote }}{{ end }}]
          env:
            {{- include "nodewright.env" $root | nindent 12 }}
            {{- include (printf "nodewright.%sEnv" $command) $root | nindent 12 }}
            {{- with $values.env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- with $values.envFrom }}
          envFrom:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          ports:
            - name: http-metrics
              containerPort: {{ $root.Values.metrics.port }}
              protocol: TCP
            - name: http
              containerPort: {{ $root.Values.healthProbe.port }}
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /healthz
              port: http
            initialDelaySeconds: 30
            periodSeconds: 10
            timeoutSeconds: 10
          readinessProbe:
            httpGet:
              path: /readyz
              port: http
            initialDelaySeconds: 5
            periodSeconds: 10
            timeoutSeconds: 10
          {{- with $values.resources }}
          resources:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with $root.Values.securityContext }}
          securityContext:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- if $root.Values.temporal.tls.secretName }}
            - name: temporal-tls
              mountPath: {{ include "nodewright.temporalTlsDirectory" $root }}
              readOnly: true
            {{- end }}
            {{- if and (eq $command "worker") (include "nodewright.azureCertificate" $root) }}
            - name: azure-credential
              mountPath: {{ include "nodewright.azureCredentialDirectory" $root }}
              readOnly: true
            {{- end }}
            {{- with $root.Values.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        {{- /* The root filesystem is read-only; Python and its libraries write temporary files here. */}}
        - name: tmp
          emptyDir: {}
        {{- with $root.Values.temporal.tls }}
        {{- if .secretName }}
        - name: temporal-tls
          secret:
            secretName: {{ .secretName | quote }}
            defaultMode: 0440
            items:
              {{- if .clientCertificate }}
              - {key: tls.crt, path: tls.crt}
              - {key: tls.key, path: tls.key}
              {{- end }}
              {{- if .caCertificate }}
              - {key: ca.crt, path: ca.crt}
              {{- end }}
        {{- end }}
        {{- end }}
        {{- if and (eq $command "worker") (include "nodewright.azureCertificate" $root) }}
        - name: azure-credential
          secret:
            secretName: {{ $root.Values.azure.servicePrincipal.secretName | quote }}
            defaultMode: 0440
            items:
              - {key: certificate.pem, path: certificate.pem}
        {{- end }}
        {{- with $root.Values.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{- end -}}
