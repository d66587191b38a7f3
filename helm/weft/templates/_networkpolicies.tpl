{{/*
Helpers of networkpolicies.yaml. Ports derived from the connection values are TCP; an explicit
networkPolicy.<kind>.ports list replaces them.
*/}}

{{/* Port of "host:port" (or of a URL's host), else the default: (dict "host" h "default" p). */}}
{{- define "weft.np.hostPort" -}}
{{- $found := regexFind ":[0-9]+$" (trim .host) -}}
{{- if $found -}}{{- trimPrefix ":" $found -}}{{- else -}}{{- .default -}}{{- end -}}
{{- end -}}

{{/* Comma-separated ports of one external dependency: kafka, postgres, redis, llm or tracing
(the OTLP collector). */}}
{{- define "weft.np.derivedPorts" -}}
{{- $root := .root -}}
{{- if eq .kind "kafka" -}}
{{- $ports := list -}}
{{- range (splitList "," (include "weft.kafkaBootstrap" $root)) -}}
{{- if trim . -}}
{{- $ports = append $ports (include "weft.np.hostPort" (dict "host" . "default" "9092")) -}}
{{- end -}}
{{- end -}}
{{- $ports | uniq | join "," -}}
{{- else if eq .kind "postgres" -}}
{{- if and $root.Values.postgres.url (not $root.Values.secrets.existingSecret) -}}
{{- include "weft.np.hostPort" (dict "host" (urlParse $root.Values.postgres.url).host "default" "5432") -}}
{{- else -}}5432{{- end -}}
{{- else if eq .kind "redis" -}}
{{- if and $root.Values.redis.url (not $root.Values.redis.existingSecret) -}}
{{- include "weft.np.hostPort" (dict "host" (urlParse $root.Values.redis.url).host "default" "6379") -}}
{{- else -}}6379{{- end -}}
{{- else if eq .kind "tracing" -}}
{{- $url := urlParse $root.Values.tracing.otlpEndpoint -}}
{{- include "weft.np.hostPort" (dict "host" $url.host "default" (ternary "443" "80" (eq $url.scheme "https"))) -}}
{{- else if eq .kind "llm" -}}
{{- $url := urlParse $root.Values.llm.baseUrl -}}
{{- include "weft.np.hostPort" (dict "host" $url.host "default" (ternary "443" "80" (eq $url.scheme "https"))) -}}
{{- end -}}
{{- end -}}

{{/* `ports:` items of one external dependency: (dict "root" $ "kind" "kafka"). */}}
{{- define "weft.np.ports" -}}
{{- $explicit := (index .root.Values.networkPolicy .kind).ports -}}
{{- if $explicit -}}
{{- toYaml $explicit -}}
{{- else -}}
{{- range $i, $port := splitList "," (include "weft.np.derivedPorts" .) }}
{{- if $i }}{{ "\n" }}{{ end -}}
- port: {{ atoi $port }}
  protocol: TCP
{{- end -}}
{{- end -}}
{{- end -}}

{{/* ipBlock peers covering every IPv4 and IPv6 address except metadataCidrs and .except:
(dict "root" $ "except" (list ...)). */}}
{{- define "weft.np.ipBlocks" -}}
{{- $all := concat .root.Values.networkPolicy.metadataCidrs (.except | default list) | uniq -}}
{{- $v4 := list -}}
{{- $v6 := list -}}
{{- range $all -}}
{{- if contains ":" . -}}{{- $v6 = append $v6 . -}}{{- else -}}{{- $v4 = append $v4 . -}}{{- end -}}
{{- end -}}
- ipBlock:
    cidr: 0.0.0.0/0
    {{- with $v4 }}
    except:
      {{- toYaml . | nindent 6 }}
    {{- end }}
- ipBlock:
    cidr: ::/0
    {{- with $v6 }}
    except:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end -}}

{{/* One egress rule to an external dependency: (dict "root" $ "kind" "kafka" "component"
"tool-exec"). Its `to` is networkPolicy.<kind>.to, or any pod of any namespace and any
address but the metadata ones; a tool worker (networkPolicy.toolWorkers.services) gets no
such default: it would reach every private address on that port. */}}
{{- define "weft.np.externalEgress" -}}
{{- $cfg := index .root.Values.networkPolicy .kind -}}
{{- $np := .root.Values.networkPolicy -}}
{{- if and (not $cfg.to) .component (has .component $np.toolWorkers.services) -}}
{{- fail (printf "networkPolicy.%s.to is required: %s is a tool worker (networkPolicy.toolWorkers.services), which reaches no private address that is not named; give the NetworkPolicyPeers of your %s (a namespaceSelector/podSelector, or an ipBlock of its CIDR)" .kind .component .kind) -}}
{{- end -}}
- to:
    {{- if $cfg.to }}
    {{- toYaml $cfg.to | nindent 4 }}
    {{- else }}
    - namespaceSelector: {}
    {{- include "weft.np.ipBlocks" (dict "root" .root) | nindent 4 }}
    {{- end }}
  ports:
    {{- include "weft.np.ports" . | nindent 4 }}
{{- end -}}

{{/* A peer selecting one component's pods of this release: (dict "root" $ "name" "memory"). */}}
{{- define "weft.np.componentPeer" -}}
- podSelector:
    matchLabels:
      {{- include "weft.selectorLabels" . | nindent 6 }}
{{- end -}}
