#!/usr/bin/env python3
"""Envoy's rate limit client, as a gateway would call Sluice: grpcio with the protos that
Envoy's own project generates (the `xds-protos` package), nothing written for Sluice.

Reads one JSON object on stdin and prints the answers as JSON on stdout:

    {"targets": ["127.0.0.1:50051", ...],   # calls go round-robin over these
     "concurrent": false,                   # true: every call at once
     "calls": [{"domain": "acme",
                "metadata": {"x-api-key": "sl_chk_..."},
                "hits_addend": 0,           # the request's, optional
                "descriptors": [{"entries": [["remote_address", "10.0.0.1"]],
                                 "hits_addend": 2,          # optional, the descriptor's own
                                 "limit": 5}]}]}            # optional, an override: 5 a
                                                            # second, or {"requests_per_unit":
                                                            # 5, "unit": "MINUTE"}

Each answer is {"grpc": "OK" | a status code name, "message": ...} and, for OK,
"overall", "statuses" and "headers". The Rust tests (server/tests/api/grpc.rs) start the
servers and judge the answers.
"""

import json
import sys

import grpc
from google.protobuf import wrappers_pb2
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from envoy.type.v3 import ratelimit_unit_pb2

Response = rls_pb2.RateLimitResponse


def request(call):
    descriptors = []
    for d in call["descriptors"]:
        fields = {
            "entries": [
                ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in d["entries"]
            ]
        }
        if "hits_addend" in d:
            fields["hits_addend"] = wrappers_pb2.UInt64Value(value=d["hits_addend"])
        if "limit" in d:
            limit = d["limit"]
            if not isinstance(limit, dict):
                limit = {"requests_per_unit": limit, "unit": "SECOND"}
            fields["limit"] = ratelimit_pb2.RateLimitDescriptor.RateLimitOverride(
                requests_per_unit=limit["requests_per_unit"],
                unit=ratelimit_unit_pb2.RateLimitUnit.Value(limit["unit"]),
            )
        descriptors.append(ratelimit_pb2.RateLimitDescriptor(**fields))
    return rls_pb2.RateLimitRequest(
        domain=call["domain"], descriptors=descriptors, hits_addend=call.get("hits_addend", 0)
    )


def status(s):
    out = {"code": Response.Code.Name(s.code), "remaining": s.limit_remaining}
    if s.HasField("current_limit"):
        out["limit"] = {
            "name": s.current_limit.name,
            "requests_per_unit": s.current_limit.requests_per_unit,
            "unit": Response.RateLimit.Unit.Name(s.current_limit.unit),
        }
    if s.HasField("duration_until_reset"):
        d = s.duration_until_reset
        out["reset_ms"] = d.seconds * 1000 + d.nanos // 1_000_000
    return out


def answer(response):
    return {
        "grpc": "OK",
        "overall": Response.Code.Name(response.overall_code),
        "statuses": [status(s) for s in response.statuses],
        "headers": {h.key: h.value for h in response.response_headers_to_add},
    }


def failure(error):
    return {"grpc": error.code().name, "message": error.details()}


def main():
    job = json.load(sys.stdin)
    channels = [grpc.insecure_channel(t) for t in job["targets"]]
    stubs = [rls_pb2_grpc.RateLimitServiceStub(c) for c in channels]
    for c in channels:
        grpc.channel_ready_future(c).result(timeout=10)
    calls = job["calls"]

    def send(i, call, method):
        metadata = list(call.get("metadata", {}).items())
        stub = stubs[i % len(stubs)]
        return getattr(stub.ShouldRateLimit, method)(request(call), metadata=metadata, timeout=30)

    answers = []
    if job.get("concurrent"):
        pending = [send(i, call, "future") for i, call in enumerate(calls)]
        for p in pending:
            try:
                answers.append(answer(p.result()))
            except grpc.RpcError as e:
                answers.append(failure(e))
    else:
        for i, call in enumerate(calls):
            try:
                answers.append(answer(send(i, call, "__call__")))
            except grpc.RpcError as e:
                answers.append(failure(e))
    json.dump(answers, sys.stdout)


if __name__ == "__main__":
    main()
