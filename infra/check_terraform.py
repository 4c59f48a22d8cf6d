"""Structural checks of infra/terraform that `tofu fmt` and checkov do not make.

Parses every .tf file with python-hcl2 and asserts:
  * every variable has a non-empty description and a type; every validation has a condition
    and an error message; every output has a description;
  * every reference to a resource, data source, variable or local (in outputs and everywhere
    else) names one that is declared;
  * terraform.required_version is set; every provider the resources use is in
    required_providers with a source and a pinned version (`~>` or exact, not an open `>=`);
  * no hard-coded credentials: no AWS key ids or secret-looking literals in .tf, templates or
    example variables, no access_key/secret_key/token in a provider block;
  * every S3 bucket has versioning Enabled, a public access block with all four switches on, and
    server-side encryption;
  * instances and launch templates require IMDSv2 and encrypt their EBS volumes; no ingress rule
    opens a port to 0.0.0.0/0;
  * every templatefile() names an existing template, and every variable a template interpolates
    is passed to it.

Usage: python check_terraform.py DIR  (exit 1 with one line per problem on failure)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import hcl2

PROBLEMS: list[str] = []


def problem(where: str, msg: str) -> None:
    PROBLEMS.append(f"{where}: {msg}")


def unq(value: Any) -> Any:
    """python-hcl2 8 keeps the quotes of labels and string literals: drop them."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def blocks(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return list(doc.get(kind, []))


def labelled(doc: dict[str, Any], kind: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(type, name, body) for two-label blocks: resource "t" "n" / data "t" "n"."""
    out = []
    for entry in blocks(doc, kind):
        for rtype, named in entry.items():
            for rname, body in named.items():
                out.append((unq(rtype), unq(rname), body))
    return out


def single(doc: dict[str, Any], kind: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, body) for one-label blocks: variable "n" / output "n"."""
    out = []
    for entry in blocks(doc, kind):
        for name, body in entry.items():
            out.append((unq(name), body))
    return out


def first(body: dict[str, Any], key: str) -> dict[str, Any] | None:
    """A nested block (python-hcl2 gives a list of bodies)."""
    value = body.get(key)
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return value[0]
    return None


def walk_strings(value: Any):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k != "__comments__":
                yield from walk_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk_strings(v)


def is_true(value: Any) -> bool:
    return value is True or unq(value) == "true"


REF = re.compile(r"(?<![\w.\"-])(data\.)?([a-z][a-z0-9]*_[a-z0-9_]+)\.([A-Za-z_][\w-]*)")
VAR_REF = re.compile(r"(?<![\w.])var\.([A-Za-z_][\w-]*)")
LOCAL_REF = re.compile(r"(?<![\w.])local\.([A-Za-z_][\w-]*)")
AWS_KEY_ID = re.compile(r"\b(AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}\b")
SECRET_ASSIGN = re.compile(
    r"(?i)\b(access_key|secret_key|secret_access_key|aws_secret_access_key|session_token|"
    r"password|token)\s*=\s*\"[^\"$]{8,}\""
)
PINNED = re.compile(r"^\s*(~>\s*\d+(\.\d+)+|=?\s*\d+\.\d+\.\d+)\s*$")


def expressions(body: Any) -> str:
    """Every expression string of a body, joined (string literals included)."""
    return "\n".join(walk_strings(body))


def strip_string_literals(expr: str) -> str:
    """Drops the text of string literals outside ${...} so that "s3:GetObject" is no reference."""
    return re.sub(r'"(?:[^"\\$]|\\.)*"', '""', expr)


def main(root: Path) -> int:
    tf_files = sorted(root.rglob("*.tf"))
    if not tf_files:
        problem(str(root), "no .tf files")
    docs: dict[Path, dict[str, Any]] = {}
    for path in tf_files:
        try:
            with path.open() as fh:
                docs[path] = hcl2.load(fh)
        except Exception as exc:  # noqa: BLE001 - any parse error is a finding
            problem(str(path), f"does not parse as HCL2: {exc}")

    resources: set[str] = set()
    data_sources: set[str] = set()
    variables: dict[str, dict[str, Any]] = {}
    locals_: dict[str, Any] = {}
    outputs: dict[str, dict[str, Any]] = {}
    providers_used: set[str] = set()
    required: dict[str, dict[str, Any]] = {}
    required_version = False
    where: dict[str, str] = {}

    for path, doc in docs.items():
        rel = str(path.relative_to(root.parent))
        for rtype, rname, _ in labelled(doc, "resource"):
            key = f"{rtype}.{rname}"
            if key in resources:
                problem(rel, f"resource {key} declared twice")
            resources.add(key)
            providers_used.add(rtype.split("_", 1)[0])
        for rtype, rname, _ in labelled(doc, "data"):
            data_sources.add(f"{rtype}.{rname}")
            providers_used.add(rtype.split("_", 1)[0])
        for name, body in single(doc, "variable"):
            variables[name] = body
            where[f"var.{name}"] = rel
        for name, body in single(doc, "output"):
            outputs[name] = body
            where[f"output.{name}"] = rel
        for entry in blocks(doc, "locals"):
            for k, v in entry.items():
                if k != "__comments__" and k != "__is_block__":
                    locals_[k] = v
        for entry in blocks(doc, "terraform"):
            if "required_version" in entry:
                required_version = True
            for rp in entry.get("required_providers", []):
                for pname, spec in rp.items():
                    if pname.startswith("__"):
                        continue
                    required[unq(pname)] = spec if isinstance(spec, dict) else {}
        for pname, body in single(doc, "provider"):
            for key in ("access_key", "secret_key", "token", "shared_credentials_file"):
                if key in body:
                    problem(rel, f'provider "{pname}" sets {key}: credentials belong in the environment')

    # ------------------------------------------------------------------ variables and outputs
    for name, body in variables.items():
        w = where[f"var.{name}"]
        if not str(unq(body.get("description", ""))).strip():
            problem(w, f'variable "{name}" has no description')
        if "type" not in body:
            problem(w, f'variable "{name}" has no type')
        for v in body.get("validation", []):
            if "condition" not in v or not str(unq(v.get("error_message", ""))).strip():
                problem(w, f'variable "{name}" has a validation without condition or error_message')
    for name, body in outputs.items():
        if not str(unq(body.get("description", ""))).strip():
            problem(where[f"output.{name}"], f'output "{name}" has no description')
    if not outputs:
        problem(str(root), "no outputs: the benchmark script reads them")

    # ------------------------------------------------------------------ references
    def check_refs(text: str, ctx: str) -> None:
        text = strip_string_literals(text)
        for m in REF.finditer(text):
            is_data, rtype, rname = m.group(1), m.group(2), m.group(3)
            if rtype in ("path", "each", "count", "self", "terraform"):
                continue
            if rtype.split("_", 1)[0] not in providers_used | set(required):
                continue
            key = f"{rtype}.{rname}"
            if is_data and key not in data_sources:
                problem(ctx, f"references data.{key}, which is not declared")
            elif not is_data and key not in resources:
                problem(ctx, f"references {key}, which is not declared")
        for m in VAR_REF.finditer(text):
            if m.group(1) not in variables:
                problem(ctx, f"references var.{m.group(1)}, which is not declared")
        for m in LOCAL_REF.finditer(text):
            if m.group(1) not in locals_:
                problem(ctx, f"references local.{m.group(1)}, which is not defined")

    for path, doc in docs.items():
        rel = str(path.relative_to(root.parent))
        for kind in ("resource", "data", "output", "locals", "module", "provider"):
            for entry in blocks(doc, kind):
                check_refs(expressions(entry), f"{rel} ({kind})")

    # Outputs must reach at least one declared resource, directly or through locals.
    def reaches_resource(text: str, seen: set[str]) -> bool:
        text = strip_string_literals(text)
        for m in REF.finditer(text):
            key = f"{m.group(2)}.{m.group(3)}"
            if key in resources or key in data_sources:
                return True
        for m in LOCAL_REF.finditer(text):
            name = m.group(1)
            if name in locals_ and name not in seen:
                seen.add(name)
                if reaches_resource(expressions(locals_[name]), seen):
                    return True
        return False

    if outputs and not any(reaches_resource(expressions(b), set()) for b in outputs.values()):
        problem(str(root), "no output refers to a resource")

    # ------------------------------------------------------------------ provider pinning
    if not required_version:
        problem(str(root), "terraform.required_version is not set")
    for pname in sorted(providers_used):
        spec = required.get(pname)
        if spec is None:
            problem(str(root), f'provider "{pname}" is used but not in required_providers')
            continue
        if not unq(spec.get("source", "")):
            problem(str(root), f'required_providers.{pname} has no source')
        version = str(unq(spec.get("version", "")))
        if not PINNED.match(version):
            problem(
                str(root),
                f'required_providers.{pname} version "{version}" is not pinned (use "~> X.Y" or an exact version)',
            )

    # ------------------------------------------------------------------ credentials
    scanned = list(tf_files) + sorted(root.rglob("*.tftpl")) + sorted(root.rglob("*.tfvars*"))
    for path in scanned:
        text = path.read_text()
        for lineno, line in enumerate(text.splitlines(), 1):
            if AWS_KEY_ID.search(line):
                problem(f"{path.relative_to(root.parent)}:{lineno}", "AWS access key id in the source")
            if SECRET_ASSIGN.search(line):
                problem(f"{path.relative_to(root.parent)}:{lineno}", "hard-coded secret")

    # ------------------------------------------------------------------ S3, EC2, security groups
    all_res = [(t, n, b) for doc in docs.values() for t, n, b in labelled(doc, "resource")]

    def companions(rtype: str, bucket: str) -> list[dict[str, Any]]:
        pat = re.compile(rf"\baws_s3_bucket\.{re.escape(bucket)}\.(id|bucket)\b")
        return [b for t, _, b in all_res if t == rtype and pat.search(str(b.get("bucket", "")))]

    for t, n, b in all_res:
        if t != "aws_s3_bucket":
            continue
        ctx = f"aws_s3_bucket.{n}"
        vers = companions("aws_s3_bucket_versioning", n)
        if not vers or unq((first(vers[0], "versioning_configuration") or {}).get("status")) != "Enabled":
            problem(ctx, "has no aws_s3_bucket_versioning with status Enabled")
        pabs = companions("aws_s3_bucket_public_access_block", n)
        switches = ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets")
        if not pabs:
            problem(ctx, "has no aws_s3_bucket_public_access_block")
        else:
            for s in switches:
                if not is_true(pabs[0].get(s)):
                    problem(ctx, f"public access block does not set {s} = true")
        if not companions("aws_s3_bucket_server_side_encryption_configuration", n):
            problem(ctx, "has no server-side encryption configuration")
        if unq(b.get("acl", "private")) not in ("private", None):
            problem(ctx, f"acl {b.get('acl')} is not private")

    for t, n, b in all_res:
        ctx = f"{t}.{n}"
        if t in ("aws_instance", "aws_launch_template"):
            md = first(b, "metadata_options")
            if not md or unq(md.get("http_tokens")) != "required":
                problem(ctx, "does not require IMDSv2 (metadata_options.http_tokens = \"required\")")
        if t == "aws_instance":
            rbd = first(b, "root_block_device")
            if not rbd or not is_true(rbd.get("encrypted")):
                problem(ctx, "root_block_device is not encrypted")
        if t == "aws_launch_template":
            for bdm in b.get("block_device_mappings", []):
                ebs = first(bdm, "ebs")
                if ebs is not None and not is_true(ebs.get("encrypted")):
                    problem(ctx, f"block device {unq(bdm.get('device_name'))} is not encrypted")
        if t == "aws_ebs_volume" and not is_true(b.get("encrypted")):
            problem(ctx, "is not encrypted")
        if t == "aws_vpc_security_group_ingress_rule" and "0.0.0.0/0" in str(b.get("cidr_ipv4", "")):
            problem(ctx, "opens ingress to 0.0.0.0/0")
        if t == "aws_security_group":
            for ing in b.get("ingress", []):
                if "0.0.0.0/0" in str(ing.get("cidr_blocks", "")):
                    problem(ctx, "opens ingress to 0.0.0.0/0")

    # ------------------------------------------------------------------ templates
    tf_text = {p: p.read_text() for p in tf_files}
    call = re.compile(r'templatefile\(\s*"\$\{path\.module\}/([^"]+)"\s*,')
    tmpl_use = re.compile(r"(?<!\$)\$\{\s*([A-Za-z_]\w*)|%\{\s*(?:if|for\s+\w+(?:\s*,\s*\w+)?\s+in)\s+!?\s*([A-Za-z_]\w*)")
    for path, text in tf_text.items():
        for m in call.finditer(text):
            tpath = root / m.group(1)
            ctx = f"{path.relative_to(root.parent)}: templatefile({m.group(1)})"
            if not tpath.is_file():
                problem(ctx, "template does not exist")
                continue
            # The variables object: up to the parenthesis that closes templatefile(.
            depth, i = 1, m.end()
            while i < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            arg = text[m.end() : i - 1]
            passed = set(re.findall(r"(?m)^\s*([A-Za-z_]\w*)\s*=", arg))
            passed |= set(re.findall(r"[{,]\s*([A-Za-z_]\w*)\s*=", arg))
            for lm in LOCAL_REF.finditer(arg):
                value = locals_.get(lm.group(1))
                if isinstance(value, dict):
                    passed |= {k for k in value if not k.startswith("__")}
            used = {a or b for a, b in tmpl_use.findall(tpath.read_text())}
            for name in sorted(used - passed):
                problem(ctx, f"template uses ${{{name}}}, which is not passed to it")

    if PROBLEMS:
        for p in PROBLEMS:
            print(f"  FAIL {p}")
        print(f"check_terraform: {len(PROBLEMS)} problem(s) in {len(docs)} file(s)")
        return 1
    print(
        f"check_terraform: {len(docs)} files, {len(resources)} resources, {len(data_sources)} data sources, "
        f"{len(variables)} variables, {len(outputs)} outputs: all rules hold"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1]).resolve()))
