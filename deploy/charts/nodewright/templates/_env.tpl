{{/*
The processes' environment. Every NODEWRIGHT_* name here is one the code reads (workers/settings.py,
workers/azure.py); tests/deploy/test_dockerfile.py fails on a name it does not know.
*/}}

{{/* Where the Temporal TLS Secret is mounted. */}}
{{- define "nodewright.temporalTlsDirectory" -}}/etc/nodewright/temporal-tls{{- end -}}

{{/* "true" when the processes connect to Temporal with TLS: asked for, a TLS Secret, or an API key. */}}
{{- define "nodewright.temporalTls" -}}
{{- $tls := .Values.temporal.tls -}}
{{- if or $tls.enabled $tls.secretName .Values.temporal.apiKey.secretName -}}true{{- end -}}
{{- end -}}

{{/* Where the pods reach Temporal: temporal.address, else the Service of the release's embedded Temporal. */}}
{{- define "nodewright.temporalAddress" -}}
{{- .Values.temporal.address | default (printf "%s-temporal.%s.svc:%d" (include "nodewright.fullname" .) .Release.Namespace (int .Values.temporal.embedded.port)) -}}
{{- end -}}

{{/* A value nodewright cannot run without: fails `helm template` naming the value and what it is. */}}
{{- define "nodewright.required" -}}
{{- required (printf "%s is required: %s" (index . 0) (index . 2)) (index . 1) | quote -}}
{{- end -}}

{{/* The settings both processes read, from settings.* and temporal.*. */}}
{{- define "nodewright.env" -}}
{{- $settings := .Values.settings -}}
{{- $azure := $settings.azure -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: NODEWRIGHT_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: NODEWRIGHT_METRICS_PORT
  value: {{ .Values.metrics.port | int64 | quote }}
- name: NODEWRIGHT_HEALTH_PROBE_PORT
  value: {{ .Values.healthProbe.port | int64 | quote }}
- name: NODEWRIGHT_TEMPORAL_ADDRESS
  value: {{ include "nodewright.temporalAddress" . | quote }}
- name: NODEWRIGHT_TEMPORAL_NAMESPACE
  value: {{ .Values.temporal.namespace | quote }}
- name: NODEWRIGHT_TASK_QUEUE
  value: {{ .Values.temporal.taskQueue | quote }}
{{- if include "nodewright.temporalTls" . }}
- name: NODEWRIGHT_TEMPORAL_TLS
  value: "true"
{{- end }}
{{- with .Values.temporal.tls }}
{{- if .secretName }}
{{- if .clientCertificate }}
- name: NODEWRIGHT_TEMPORAL_TLS_CERT_FILE
  value: {{ printf "%s/tls.crt" (include "nodewright.temporalTlsDirectory" $) | quote }}
- name: NODEWRIGHT_TEMPORAL_TLS_KEY_FILE
  value: {{ printf "%s/tls.key" (include "nodewright.temporalTlsDirectory" $) | quote }}
{{- end }}
{{- if .caCertificate }}
- name: NODEWRIGHT_TEMPORAL_TLS_CA_FILE
  value: {{ printf "%s/ca.crt" (include "nodewright.temporalTlsDirectory" $) | quote }}
{{- end }}
{{- end }}
{{- with .serverName }}
- name: NODEWRIGHT_TEMPORAL_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- with .Values.temporal.apiKey }}
{{- if .secretName }}
- name: NODEWRIGHT_TEMPORAL_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .secretName | quote }}
      key: {{ .secretKey | quote }}
{{- end }}
{{- end }}
- name: NODEWRIGHT_CLUSTER_NAME
  value: {{ include "nodewright.required" (list "settings.clusterName" $settings.clusterName "the AKS cluster's name, with which every VM is tagged") }}
- name: NODEWRIGHT_CLUSTER_ENDPOINT
  value: {{ include "nodewright.required" (list "settings.clusterEndpoint" $settings.clusterEndpoint "the API server's host name that nodes join") }}
{{- /* The namespace helper fails unless the value is <namespace>/<name>. */}}
{{- $_ := include "nodewright.bootstrapTokenNamespace" . }}
- name: NODEWRIGHT_BOOTSTRAP_TOKEN_SECRET
  value: {{ $settings.bootstrapTokenSecret | quote }}
- name: NODEWRIGHT_BATCH_IDLE_SECONDS
  value: {{ $settings.batchIdleSeconds | quote }}
- name: NODEWRIGHT_BATCH_MAX_SECONDS
  value: {{ $settings.batchMaxSeconds | quote }}
- name: NODEWRIGHT_REGISTRATION_TTL_SECONDS
  value: {{ $settings.registrationTtlSeconds | quote }}
- name: NODEWRIGHT_LAUNCH_TIMEOUT_SECONDS
  value: {{ $settings.launchTimeoutSeconds | quote }}
- name: NODEWRIGHT_DISRUPTION_POLL_SECONDS
  value: {{ $settings.disruptionPollSeconds | quote }}
- name: NODEWRIGHT_DISRUPTION_VALIDATION_SECONDS
  value: {{ $settings.disruptionValidationSeconds | quote }}
- name: NODEWRIGHT_REPACK_ENABLED
  value: {{ $settings.repack.enabled | quote }}
- name: NODEWRIGHT_REPACK_MIN_SAVINGS_PER_HOUR
  value: {{ $settings.repack.minSavingsPerHour | quote }}
- name: NODEWRIGHT_REPACK_MIN_SAVINGS_PERCENT
  value: {{ $settings.repack.minSavingsPercent | quote }}
- name: NODEWRIGHT_REPACK_MAX_PODS_MOVED
  value: {{ $settings.repack.maxPodsMoved | quote }}
- name: NODEWRIGHT_REPACK_DEADLINE_SECONDS
  value: {{ $settings.repack.deadlineSeconds | quote }}
{{- $gates := $settings.featureGates }}
- name: FEATURE_GATES
  value: "NodeRepair={{ $gates.nodeRepair }},ReservedCapacity={{ $gates.reservedCapacity }},SpotToSpotConsolidation={{ $gates.spotToSpotConsolidation }},NodeOverlay={{ $gates.nodeOverlay }},StaticCapacity={{ $gates.staticCapacity }},CapacityBuffer={{ $gates.capacityBuffer }}"
- name: MIN_VALUES_POLICY
  value: {{ $settings.minValuesPolicy | quote }}
- name: NODEWRIGHT_REPAIR_NOT_READY_SECONDS
  value: {{ $settings.repairNotReadySeconds | quote }}
- name: NODEWRIGHT_CATALOG_REFRESH_SECONDS
  value: {{ $settings.catalogRefreshSeconds | quote }}
- name: NODEWRIGHT_GARBAGE_COLLECTION_SECONDS
  value: {{ $settings.garbageCollectionSeconds | quote }}
- name: NODEWRIGHT_BOOTSTRAP_TOKEN_ROTATION_SECONDS
  value: {{ $settings.bootstrapTokenRotationSeconds | quote }}
- name: NODEWRIGHT_KUBE_QPS
  value: {{ $settings.kubeClientQps | quote }}
- name: NODEWRIGHT_KUBE_BURST
  value: {{ $settings.kubeClientBurst | int64 | quote }}
- name: NODEWRIGHT_AZURE_SUBSCRIPTION_ID
  value: {{ include "nodewright.required" (list "settings.azure.subscriptionId" $azure.subscriptionId "the cluster's subscription id") }}
- name: NODEWRIGHT_AZURE_RESOURCE_GROUP
  value: {{ include "nodewright.required" (list "settings.azure.nodeResourceGroup" $azure.nodeResourceGroup "the node resource group (MC_...), where VMs and NICs are created") }}
- name: NODEWRIGHT_AZURE_LOCATION
  value: {{ include "nodewright.required" (list "settings.azure.location" $azure.location "the cluster's region, e.g. eastus") }}
- name: NODEWRIGHT_AZURE_CLOUD
  value: {{ $azure.cloud | quote }}
- name: NODEWRIGHT_AZURE_SUBNET_ID
  value: {{ include "nodewright.required" (list "settings.azure.subnetId" $azure.subnetId "the resource id of the default node subnet") }}
- name: NODEWRIGHT_KUBERNETES_VERSION
  value: {{ include "nodewright.required" (list "settings.azure.kubernetesVersion" $azure.kubernetesVersion "the nodes' Kubernetes version, e.g. 1.33.5") }}
- name: NODEWRIGHT_NODE_IMAGE_VERSION
  value: {{ include "nodewright.required" (list "settings.azure.nodeImageVersion" $azure.nodeImageVersion "the AKS node image version, e.g. 202512.18.0") }}
- name: NODEWRIGHT_SSH_PUBLIC_KEY
  value: {{ include "nodewright.required" (list "settings.azure.sshPublicKey" $azure.sshPublicKey "the nodes' admin SSH public key") }}
{{- with $azure.kubeletIdentityId }}
- name: NODEWRIGHT_KUBELET_IDENTITY_ID
  value: {{ . | quote }}
{{- end }}
{{- with $azure.imageGallerySubscriptionId }}
- name: NODEWRIGHT_IMAGE_GALLERY_SUBSCRIPTION_ID
  value: {{ . | quote }}
{{- end }}
{{- with $azure.windows.adminSecret }}
- name: NODEWRIGHT_WINDOWS_ADMIN_SECRET
  value: {{ . | quote }}
{{- end }}
- name: NODEWRIGHT_WINDOWS_LICENSE_TYPE
  value: {{ $azure.windows.licenseType | quote }}
{{- end -}}

{{/* What only the controller reads: leader election on a Lease in the release's namespace. */}}
{{- define "nodewright.controllerEnv" -}}
{{- with .Values.controller.leaderElection -}}
- name: NODEWRIGHT_LEADER_ELECTION
  value: {{ .enabled | toString | quote }}
{{- if .enabled }}
- name: NODEWRIGHT_LEADER_ELECTION_NAME
  value: {{ .name | quote }}
- name: NODEWRIGHT_LEADER_ELECTION_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: NODEWRIGHT_LEADER_ELECTION_LEASE_SECONDS
  value: {{ .leaseSeconds | quote }}
- name: NODEWRIGHT_LEADER_ELECTION_RENEW_SECONDS
  value: {{ .renewSeconds | quote }}
- name: NODEWRIGHT_LEADER_ELECTION_RETRY_SECONDS
  value: {{ .retrySeconds | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Where a service principal's certificate is mounted in worker pods. */}}
{{- define "nodewright.azureCredentialDirectory" -}}/etc/nodewright/azure{{- end -}}

{{/* "true" when worker pods mount the service principal's Secret (its certificate). */}}
{{- define "nodewright.azureCertificate" -}}
{{- with .Values.azure -}}
{{- if and (eq .credential "servicePrincipal") .servicePrincipal.certificate -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* What only the worker reads: the shutdown grace, and what it signs in to Azure as (never the controller). */}}
{{- define "nodewright.workerEnv" -}}
- name: NODEWRIGHT_SHUTDOWN_GRACE_SECONDS
  value: {{ .Values.worker.shutdownGraceSeconds | quote }}
{{- with .Values.azure }}
- name: NODEWRIGHT_AZURE_CREDENTIAL
  value: {{ .credential | quote }}
{{- if eq .credential "servicePrincipal" }}
{{- $principal := .servicePrincipal }}
- name: AZURE_CLIENT_ID
  value: {{ include "nodewright.required" (list "azure.servicePrincipal.clientId" $principal.clientId "the service principal's application (client) id") }}
- name: AZURE_TENANT_ID
  value: {{ include "nodewright.required" (list "azure.servicePrincipal.tenantId" $principal.tenantId "the service principal's tenant id") }}
{{- $secret := include "nodewright.required" (list "azure.servicePrincipal.secretName" $principal.secretName "the Secret with the service principal's client secret or certificate") }}
{{- if $principal.certificate }}
- name: AZURE_CLIENT_CERTIFICATE_PATH
  value: {{ printf "%s/certificate.pem" (include "nodewright.azureCredentialDirectory" $) | quote }}
- name: AZURE_CLIENT_CERTIFICATE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: certificate-password
      optional: true
{{- else }}
- name: AZURE_CLIENT_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: client-secret
{{- end }}
{{- else if eq .credential "managedIdentity" }}
{{- with .managedIdentity.clientId }}
- name: AZURE_CLIENT_ID
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Combinations of values the processes would reject or that defeat their purpose, refused at render time. */}}
{{- define "nodewright.validate" -}}
{{- $election := .Values.controller.leaderElection -}}
{{- if and $election.enabled (ge (float64 $election.renewSeconds) (float64 $election.leaseSeconds)) -}}
{{- fail "controller.leaderElection.renewSeconds must be shorter than leaseSeconds: the leader must give up before another replica may take the Lease" -}}
{{- end -}}
{{- if and (not $election.enabled) (gt (int64 .Values.controller.replicas) 1) -}}
{{- fail "controller.leaderElection.enabled=false needs controller.replicas=1: without the Lease every replica would watch the cluster and signal workflows" -}}
{{- end -}}
{{- if ge (float64 .Values.worker.shutdownGraceSeconds) (float64 .Values.terminationGracePeriodSeconds) -}}
{{- fail "worker.shutdownGraceSeconds must be shorter than terminationGracePeriodSeconds, or the kubelet kills the worker before its activities finish" -}}
{{- end -}}
{{- if lt (float64 .Values.settings.batchMaxSeconds) (float64 .Values.settings.batchIdleSeconds) -}}
{{- fail "settings.batchMaxSeconds must be at least settings.batchIdleSeconds: a batch closes after at most the maximum" -}}
{{- end -}}
{{- if and (not .Values.temporal.address) (include "nodewright.temporalTls" .) -}}
{{- fail "temporal.tls and temporal.apiKey are for an external Temporal: set temporal.address too (the embedded Temporal serves plain gRPC inside the cluster)" -}}
{{- end -}}
{{- with .Values.temporal.tls -}}
{{- if and .secretName (not (or .clientCertificate .caCertificate)) -}}
{{- fail "temporal.tls.secretName is set but neither temporal.tls.clientCertificate nor temporal.tls.caCertificate: nothing would be read from it" -}}
{{- end -}}
{{- end -}}
{{- end -}}
