"""Fail with one clear message when no Java 17+ is on the PATH (Spark needs it)."""

import re
import shutil
import subprocess
import sys


def main() -> int:
    java = shutil.which("java")
    if java is None:
        print("Java 17+ is required to run Spark, and no `java` is on the PATH. "
              "Install a JDK 17 or newer (e.g. `apt-get install openjdk-17-jre-headless`).",
              file=sys.stderr)
        return 1
    out = subprocess.run([java, "-version"], capture_output=True, text=True)
    match = re.search(r'version "(\d+)', out.stderr + out.stdout)
    if not match or int(match.group(1)) < 17:
        print(f"Java 17+ is required to run Spark; `{java} -version` says: "
              f"{(out.stderr or out.stdout).strip().splitlines()[0] if (out.stderr or out.stdout) else 'nothing'}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
