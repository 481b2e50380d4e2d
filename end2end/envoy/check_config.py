#!/usr/bin/env python3
"""Reads an Envoy bootstrap configuration (YAML) into Envoy's own Bootstrap message, with the
protos Envoy's project publishes (`xds-protos`): an unknown or misspelt field, a value of the
wrong type or a typed_config of an unknown type is an error, as Envoy would refuse it.

Usage: check_config.py FILE. Prints, as JSON, what the Rust test
(server/tests/api/grpc.rs) judges: each rate limit filter's domain, failure mode and gRPC
metadata keys, whether its cluster speaks HTTP/2, and the descriptor keys each route's
rate_limits send.
"""

import json
import sys

import yaml
from google.protobuf import json_format

# Importing a module registers its messages, so that typed_config's "@type" resolves.
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.extensions.filters.http.ratelimit.v3 import rate_limit_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2 as options_pb2

HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def unpack(any_message, message):
    if not any_message.Unpack(message):
        raise SystemExit(f"typed_config is {any_message.type_url}, not {message.DESCRIPTOR.full_name}")
    return message


def action_key(action):
    kind = action.WhichOneof("action_specifier")
    if kind == "request_headers":
        return action.request_headers.descriptor_key
    if kind == "remote_address":
        return "remote_address"
    if kind == "generic_key":
        return action.generic_key.descriptor_key or "generic_key"
    return kind


def main():
    with open(sys.argv[1]) as f:
        document = yaml.safe_load(f)
    bootstrap = json_format.ParseDict(document, bootstrap_pb2.Bootstrap())
    http2 = {}
    for cluster in bootstrap.static_resources.clusters:
        options = cluster.typed_extension_protocol_options.get(HTTP_OPTIONS)
        http2[cluster.name] = options is not None and unpack(
            options, options_pb2.HttpProtocolOptions()
        ).explicit_http_config.HasField("http2_protocol_options")
    limiters, descriptors = [], []
    for listener in bootstrap.static_resources.listeners:
        for chain in listener.filter_chains:
            for network_filter in chain.filters:
                hcm = unpack(network_filter.typed_config, hcm_pb2.HttpConnectionManager())
                for http_filter in hcm.http_filters:
                    if http_filter.typed_config.Is(rate_limit_pb2.RateLimit.DESCRIPTOR):
                        rl = unpack(http_filter.typed_config, rate_limit_pb2.RateLimit())
                        service = rl.rate_limit_service.grpc_service
                        cluster = service.envoy_grpc.cluster_name
                        limiters.append(
                            {
                                "domain": rl.domain,
                                "failure_mode_deny": rl.failure_mode_deny,
                                "metadata": [m.key for m in service.initial_metadata],
                                "cluster": cluster,
                                "cluster_http2": http2.get(cluster, False),
                                "api": rl.rate_limit_service.transport_api_version,
                            }
                        )
                for host in hcm.route_config.virtual_hosts:
                    for route in host.routes:
                        for limit in route.route.rate_limits:
                            descriptors.append([action_key(a) for a in limit.actions])
    json.dump({"rate_limit_filters": limiters, "descriptors": descriptors}, sys.stdout)


if __name__ == "__main__":
    main()
