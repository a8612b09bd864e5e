"""Prints `package-dir<TAB>test-binary` for each test binary cargo built for the given
package folders (relative to the workspace root), read from `cargo test --no-run
--message-format=json` on standard input. Used by scripts/test to run built tests again
under another environment without building anything."""

import json
import os
import sys

root = os.getcwd()
wanted = {os.path.join(root, d) for d in sys.argv[1:]}
found = set()
for line in sys.stdin:
    try:
        message = json.loads(line)
    except json.JSONDecodeError:
        continue
    if message.get("reason") != "compiler-artifact" or not message.get("executable"):
        continue
    if not message.get("profile", {}).get("test"):
        continue
    package_dir = os.path.dirname(message["manifest_path"])
    if package_dir in wanted:
        found.add(package_dir)
        print(f"{package_dir}\t{message['executable']}")
missing = wanted - found
if missing:
    sys.exit(f"no test binaries found for {sorted(missing)}")
