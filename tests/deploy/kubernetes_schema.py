#!/usr/bin/python3
"""Checks rendered Kubernetes manifests against the Kubernetes API's own types, offline.

Reads a YAML stream of objects (what `kubectl kustomize deploy/kubernetes` prints) on stdin.
The types are those of Debian's python3-kubernetes: the Kubernetes Python client, whose model
classes are generated from the Kubernetes API's OpenAPI document (release 1.22 in Debian 12).
Each class lists its fields' JSON names and types (attribute_map, openapi_types) and refuses to
be built without a required field. An object passes when

  - its apiVersion and kind are one of KINDS below (those the manifests use),
  - every field is one its type declares (a misspelt or misplaced field is an error),
  - every value has the declared type: str, int (not a bool), bool, a list, a string map, or a
    nested object checked the same way; int-or-string fields (ports, maxUnavailable) are
    'object' in the client and take either,
  - every required field is there (the class's own check, run by building it).

Stricter than the API server in one way: a resource quantity must be a string ("4", 8Gi), as
the client's types say, where the server also takes a bare number.

When every object passes, prints them as one JSON array on stdout (for the test's
cross-reference checks) and exits 0; otherwise prints each problem, with the object and the
field path, on stderr and exits 1. Exit 2: the yaml or kubernetes module is missing.
"""

import json
import re
import sys

try:
    import yaml
    from kubernetes.client import models
    from kubernetes.client.configuration import Configuration
except ImportError as e:
    sys.stderr.write(
        f"kubernetes_schema: {e}: needs Debian's python3-yaml and python3-kubernetes "
        "(scripts/install-deps.sh --test)\n")
    sys.exit(2)

# (apiVersion, kind) -> the client's model class.
KINDS = {
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("v1", "Service"): "V1Service",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("policy/v1", "PodDisruptionBudget"): "V1PodDisruptionBudget",
}

CONFIG = Configuration()
CONFIG.client_side_validation = True

PRIMITIVES = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "float": (int, float),
    "datetime": (str,),
    "date": (str,),
}


class Checker:
    def __init__(self):
        self.problems = []

    def fail(self, where, path, message):
        self.problems.append(f"{where}: {path or '.'}: {message}")

    def check(self, value, type_name, where, path):
        """Checks value against the client's type name; returns what the model takes, or None
        after recording a problem."""
        m = re.fullmatch(r"list\[(.*)\]", type_name)
        if m:
            if not isinstance(value, list):
                self.fail(where, path, f"expected a list ({type_name}), got {kind_of(value)}")
                return None
            out = [self.check(v, m.group(1), where, f"{path}[{i}]") for i, v in enumerate(value)]
            return None if any(v is None for v in out) else out
        m = re.fullmatch(r"dict\(str, (.*)\)", type_name)
        if m:
            if not isinstance(value, dict):
                self.fail(where, path, f"expected a map ({type_name}), got {kind_of(value)}")
                return None
            out = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    self.fail(where, path, f"map key {k!r} is not a string")
                    return None
                out[k] = self.check(v, m.group(1), where, f"{path}.{k}")
            return None if any(v is None for v in out.values()) else out
        if type_name == "object":
            return value
        if type_name in PRIMITIVES:
            ok = isinstance(value, PRIMITIVES[type_name])
            if ok and type_name != "bool" and isinstance(value, bool):
                ok = False
            if not ok:
                self.fail(where, path, f"expected {type_name}, got {kind_of(value)} {value!r}")
                return None
            return value
        klass = getattr(models, type_name, None)
        if klass is None:
            self.fail(where, path, f"the client has no type {type_name}")
            return None
        if not isinstance(value, dict):
            self.fail(where, path, f"expected an object ({type_name}), got {kind_of(value)}")
            return None
        by_json = {json_name: attr for attr, json_name in klass.attribute_map.items()}
        kwargs = {}
        ok = True
        for key, v in value.items():
            attr = by_json.get(key)
            if attr is None:
                self.fail(where, join(path, key), f"unknown field of {type_name}")
                ok = False
                continue
            if v is None:
                continue
            built = self.check(v, klass.openapi_types[attr], where, join(path, key))
            if built is None:
                ok = False
            else:
                kwargs[attr] = built
        if not ok:
            return None
        try:
            return klass(local_vars_configuration=CONFIG, **kwargs)
        except ValueError as e:  # a required field missing, or a value out of its range
            self.fail(where, path, f"{type_name}: {e}")
            return None


def join(path, key):
    return f"{path}.{key}" if path else key


def kind_of(value):
    return {dict: "an object", list: "a list", str: "a string", bool: "a bool", int: "an int",
            float: "a float"}.get(type(value), type(value).__name__)


def main():
    try:
        docs = [d for d in yaml.safe_load_all(sys.stdin) if d is not None]
    except yaml.YAMLError as e:
        sys.stderr.write(f"kubernetes_schema: not YAML: {e}\n")
        return 1
    if not docs:
        sys.stderr.write("kubernetes_schema: no objects on stdin\n")
        return 1
    checker = Checker()
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            checker.fail(f"document {i}", "", "not an object")
            continue
        api, kind = doc.get("apiVersion"), doc.get("kind")
        name = (doc.get("metadata") or {}).get("name", "?")
        where = f"{kind or '?'} {name}"
        type_name = KINDS.get((api, kind))
        if type_name is None:
            known = ", ".join(f"{a} {k}" for a, k in KINDS)
            checker.fail(where, "", f"apiVersion {api!r} kind {kind!r} is not one of: {known}")
            continue
        checker.check(doc, type_name, where, "")
    if checker.problems:
        for p in checker.problems:
            sys.stderr.write(f"kubernetes_schema: {p}\n")
        return 1
    json.dump(docs, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
