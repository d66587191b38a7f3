{{/* Chart name. */}}
{{- define "weft.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Release-qualified base name; every resource is "<fullname>-<component>". Kubernetes names
are at most 63 characters and the longest suffix the chart appends is 23
("-credential-agent-config"), so the base name is at most 39: a longer one keeps its first
32 characters and ends in "-" and 6 hex characters of its sha256. Truncating both the base
and "<base>-<component>" at 63 (as before) gave gateway and gateway-projector one name for
release names of 49 to 53 characters.
*/}}
{{- define "weft.fullname" -}}
{{- $full := "" -}}
{{- if .Values.fullnameOverride -}}
{{- $full = .Values.fullnameOverride -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- $full = .Release.Name -}}
{{- else -}}
{{- $full = printf "%s-%s" .Release.Name $name -}}
{{- end -}}
{{- end -}}
{{- if gt (len $full) 39 -}}
{{- printf "%s-%s" ($full | trunc 32 | trimSuffix "-") ($full | sha256sum | trunc 6) -}}
{{- else -}}
{{- $full -}}
{{- end -}}
{{- end -}}

{{/* Name of one component: (dict "root" $ "name" "gateway"). Never truncated: a name that
does not fit fails the render instead of colliding with another. */}}
{{- define "weft.componentName" -}}
{{- $n := printf "%s-%s" (include "weft.fullname" .root) .name -}}
{{- if gt (len $n) 63 -}}
{{- fail (printf "internal: object name %s is longer than 63 characters" $n) -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{- define "weft.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "weft.labels" -}}
helm.sh/chart: {{ include "weft.chart" . }}
app.kubernetes.io/name: {{ include "weft.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: weft
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "name" "gateway"). */}}
{{- define "weft.selectorLabels" -}}
app.kubernetes.io/name: {{ include "weft.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{/* Image of one service: (dict "root" $ "name" "gateway"). */}}
{{- define "weft.image" -}}
{{- $img := .root.Values.image -}}
{{- $tag := default .root.Chart.AppVersion $img.tag -}}
{{- if $img.registry -}}
{{- printf "%s/%s%s:%s" $img.registry $img.repositoryPrefix .name $tag -}}
{{- else -}}
{{- printf "%s%s:%s" $img.repositoryPrefix .name $tag -}}
{{- end -}}
{{- end -}}

{{- define "weft.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "weft.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* True when the scripted-llm test double is deployed by this release. */}}
{{- define "weft.testDoubleEnabled" -}}
{{- $sl := index .Values.services "scripted-llm" | default dict -}}
{{- if $sl.enabled -}}true{{- end -}}
{{- end -}}

{{/* OPENAI_BASE_URL: llm.baseUrl, else the in-release test double. */}}
{{- define "weft.llmBaseUrl" -}}
{{- if .Values.llm.baseUrl -}}
{{- .Values.llm.baseUrl -}}
{{- else if include "weft.testDoubleEnabled" . -}}
{{- $sl := index .Values.services "scripted-llm" -}}
{{- printf "http://%s:%v/v1" (include "weft.componentName" (dict "root" . "name" "scripted-llm")) $sl.port -}}
{{- else -}}
{{- fail "llm.baseUrl is required (an OpenAI-compatible .../v1 URL), or set services.scripted-llm.enabled=true to use the scripted LLM test double" -}}
{{- end -}}
{{- end -}}

{{- define "weft.llmModel" -}}
{{- $_ := include "weft.llmBaseUrl" . -}}
{{- if .Values.llm.model -}}{{- .Values.llm.model -}}
{{- else if and (not .Values.llm.baseUrl) (include "weft.testDoubleEnabled" .) -}}weft-scripted
{{- else -}}{{- fail "llm.model is required when llm.baseUrl is set" -}}
{{- end -}}
{{- end -}}

{{- define "weft.embeddingModel" -}}
{{- if .Values.llm.embeddingModel -}}{{- .Values.llm.embeddingModel -}}
{{- else if and (not .Values.llm.baseUrl) (include "weft.testDoubleEnabled" .) -}}weft-scripted-embed
{{- end -}}
{{- end -}}

{{/* Secret holding WEFT_DATABASE_URL, OPENAI_API_KEY, WEFT_DEV_API_KEY. */}}
{{- define "weft.secretName" -}}
{{- default (include "weft.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* Secret read by the hook jobs (a hook itself, since hooks run before the release's resources). */}}
{{- define "weft.hookSecretName" -}}
{{- if .Values.secrets.existingSecret -}}
{{- .Values.secrets.existingSecret -}}
{{- else -}}
{{- printf "%s-hooks" (include "weft.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "weft.kafkaBootstrap" -}}
{{- required "kafka.bootstrap is required (host:port of the external Kafka 4.x brokers)" .Values.kafka.bootstrap -}}
{{- end -}}

{{- define "weft.databaseUrl" -}}
{{- required "postgres.url is required (the migration owner's postgresql+asyncpg://USER:PASSWORD@HOST:5432/DB), or set secrets.existingSecret" .Values.postgres.url -}}
{{- end -}}

{{/* Whether a service entry has a database role: not the test double, not one with
`database: false` (the engine). */}}
{{- define "weft.hasDatabase" -}}
{{- if and (not .testDouble) (or (not (hasKey . "database")) .database) -}}true{{- end -}}
{{- end -}}

{{/* Services with a database role (the image each runs: gateway-projector runs gateway). */}}
{{- define "weft.databaseServices" -}}
{{- $out := list -}}
{{- range $name, $svc := .Values.services -}}
{{- if and $svc.enabled (include "weft.hasDatabase" $svc) -}}
{{- $out = append $out ($svc.image | default $name) -}}
{{- end -}}
{{- end -}}
{{- uniq $out | sortAlpha | join "," -}}
{{- end -}}

{{/* Secret key of a service's own database URL: WEFT_<SERVICE>_DATABASE_URL. */}}
{{- define "weft.serviceDatabaseKey" -}}
{{- printf "WEFT_%s_DATABASE_URL" (. | replace "-" "_" | upper) -}}
{{- end -}}

{{/* stringData entries: each enabled service's own URL (required: fail closed). */}}
{{- define "weft.serviceDatabaseUrls" -}}
{{- $root := . -}}
{{- range $image := splitList "," (include "weft.databaseServices" .) }}
{{ include "weft.serviceDatabaseKey" $image }}: {{ required (printf "postgres.serviceUrls.%s is required (postgresql+asyncpg://weft_%s:PASSWORD@HOST:5432/DB, its own role; docs/operations.md \"Database roles\"), or set secrets.existingSecret" $image ($image | replace "-" "_")) (index $root.Values.postgres.serviceUrls $image) | quote }}
{{- end -}}
{{- end -}}

{{- define "weft.openaiApiKey" -}}
{{- $_ := include "weft.llmBaseUrl" . -}}
{{- if .Values.llm.apiKey -}}{{- .Values.llm.apiKey -}}
{{- else if and (not .Values.llm.baseUrl) (include "weft.testDoubleEnabled" .) -}}scripted-llm-test-double
{{- else -}}{{- fail "llm.apiKey is required when llm.baseUrl is set (or set secrets.existingSecret)" -}}
{{- end -}}
{{- end -}}

{{/* Pod-level settings shared by Deployments and Jobs. */}}
{{- define "weft.podSecurity" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Kafka login of one process: env entries (call with dict "root" $ "principal" "weft-<name>").
The password is the key named after the principal in kafka.sasl.existingSecret; the CA (and
the client certificate) come from kafka.tls.existingSecret, mounted by weft.kafkaTlsVolume.
*/}}
{{- define "weft.kafkaEnv" -}}
{{- $kafka := .root.Values.kafka -}}
{{- $protocol := $kafka.securityProtocol | default "PLAINTEXT" -}}
{{- if not (has $protocol (list "PLAINTEXT" "SASL_PLAINTEXT" "SASL_SSL" "SSL")) -}}
{{- fail (printf "kafka.securityProtocol %s: expected PLAINTEXT, SASL_PLAINTEXT, SASL_SSL or SSL" $protocol) -}}
{{- end -}}
- name: WEFT_KAFKA_SECURITY_PROTOCOL
  value: {{ $protocol | quote }}
{{- if hasPrefix "SASL_" $protocol }}
- name: WEFT_KAFKA_USERNAME
  value: {{ .principal | quote }}
- name: WEFT_KAFKA_PASSWORD
  valueFrom:
    secretKeyRef:
      {{- if .admin }}
      {{- /* the super user: a Secret of its own, mounted by the topics hook only */}}
      name: {{ required "kafka.sasl.admin.existingSecret is required with a SASL kafka.securityProtocol and the topics job (the super user's password, apart from the services')" $kafka.sasl.admin.existingSecret | quote }}
      key: {{ $kafka.sasl.admin.key | quote }}
      {{- else }}
      name: {{ required "kafka.sasl.existingSecret is required with a SASL kafka.securityProtocol (one key per principal: weft-gateway, weft-engine, ...)" $kafka.sasl.existingSecret | quote }}
      key: {{ .principal | quote }}
      {{- end }}
{{- end }}
{{- if and (hasSuffix "SSL" $protocol) $kafka.tls.existingSecret }}
- name: WEFT_KAFKA_SSL_CAFILE
  value: /etc/weft/kafka-tls/ca.crt
{{- if $kafka.tls.clientCertificate }}
- name: WEFT_KAFKA_SSL_CERTFILE
  value: /etc/weft/kafka-tls/tls.crt
- name: WEFT_KAFKA_SSL_KEYFILE
  value: /etc/weft/kafka-tls/tls.key
{{- end }}
{{- end }}
{{- end -}}

{{/* The volume (and its mount) of kafka.tls.existingSecret, when TLS is on. */}}
{{- define "weft.kafkaTlsOn" -}}
{{- $kafka := .Values.kafka -}}
{{- if and (hasSuffix "SSL" ($kafka.securityProtocol | default "PLAINTEXT")) $kafka.tls.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* The sandbox's own ServiceAccount (kubernetes backend: it alone holds the pods Role). */}}
{{- define "weft.sandboxServiceAccountName" -}}
{{- printf "%s-sandbox" (include "weft.fullname" .) -}}
{{- end -}}

{{/* Where the sandbox's session pods run: a namespace of their own, never the release's. */}}
{{- define "weft.sandboxPodNamespace" -}}
{{- .Values.sandbox.kubernetes.namespace | default (printf "%s-sandboxes" (include "weft.fullname" .) | trunc 63 | trimSuffix "-") -}}
{{- end -}}

{{/* The user name the API server gives the sandbox's ServiceAccount (admission policies). */}}
{{- define "weft.sandboxUserName" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "weft.sandboxServiceAccountName" .) -}}
{{- end -}}

{{/*
The sandbox backend, checked: the chart's pods run non-root without capabilities under
seccomp RuntimeDefault, where bubblewrap cannot create its namespaces, so `local` (and the
empty value, the service's default `local`) would start and then fail every command.
*/}}
{{- define "weft.sandboxBackend" -}}
{{- $backend := .Values.sandbox.backend -}}
{{- if not (has $backend (list "kubernetes" "none")) -}}
{{- fail (printf "sandbox.backend=%q cannot run in this chart: the local (bubblewrap) backend needs user namespaces, which the pods' securityContext (non-root, no capabilities, seccomp RuntimeDefault) does not allow. Use sandbox.backend=kubernetes (one pod per session) or none (sandbox tools answer that no sandbox is configured)" $backend) -}}
{{- end -}}
{{- $backend -}}
{{- end -}}

{{/*
Who scales one workload: "hpa", "keda" or "" (its Deployment's replicas). One mechanism per
workload by construction (each is chosen by one value); the Deployment then has no
`replicas` of its own. (dict "root" $ "name" "engine").
*/}}
{{- define "weft.autoscaler" -}}
{{- $v := .root.Values -}}
{{- $svc := index $v.services .name | default dict -}}
{{- if $svc.enabled -}}
{{- if eq .name "gateway" -}}
{{- if $v.autoscaling.gateway.enabled -}}hpa{{- end -}}
{{- else if eq .name "engine" -}}
{{- $mechanism := $v.autoscaling.engine.mechanism -}}
{{- if eq $mechanism "hpa" -}}hpa
{{- else if eq $mechanism "keda" -}}keda
{{- else if ne $mechanism "none" -}}
{{- fail (printf "autoscaling.engine.mechanism=%q: expected none, hpa or keda" $mechanism) -}}
{{- end -}}
{{- else if eq .name "tool-exec" -}}
{{- if $v.keda.toolExec.enabled -}}keda{{- end -}}
{{- else if eq .name "sandbox" -}}
{{- if $v.keda.sandbox.enabled -}}keda{{- end -}}
{{- else if eq .name "knowledge-worker" -}}
{{- if $v.keda.ingestion.enabled -}}keda{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding WEFT_REDIS_URL, and its key. */}}
{{- define "weft.redisSecretName" -}}
{{- .Values.redis.existingSecret | default (printf "%s-redis" (include "weft.fullname" .)) -}}
{{- end -}}
{{- define "weft.redisSecretKey" -}}
{{- if .Values.redis.existingSecret -}}{{- .Values.redis.existingSecretKey -}}{{- else -}}WEFT_REDIS_URL{{- end -}}
{{- end -}}

{{/* Secrets a service pod reads that the chart does not make (stakater Reloader's list):
(dict "root" $ "svc" $svc "name" "gateway"). */}}
{{- define "weft.externalSecrets" -}}
{{- $v := .root.Values -}}
{{- $out := list -}}
{{- if not .svc.testDouble -}}
{{- with $v.secrets.existingSecret }}{{ $out = append $out . }}{{ end -}}
{{- with $v.redis.existingSecret }}{{ $out = append $out . }}{{ end -}}
{{- if hasPrefix "SASL_" ($v.kafka.securityProtocol | default "PLAINTEXT") -}}
{{- with $v.kafka.sasl.existingSecret }}{{ $out = append $out . }}{{ end -}}
{{- end -}}
{{- if include "weft.kafkaTlsOn" .root -}}
{{- $out = append $out $v.kafka.tls.existingSecret -}}
{{- end -}}
{{- $fullname := include "weft.fullname" .root -}}
{{- $out = append $out ($v.credentials.publicKeys | default (printf "%s-credential-public" $fullname)) -}}
{{- if hasKey $v.credentials.signingKeys .name -}}
{{- $out = append $out ((index $v.credentials.signingKeys .name) | default (printf "%s-credential-%s" $fullname .name)) -}}
{{- end -}}
{{- end -}}
{{- $out | uniq | join "," -}}
{{- end -}}
