// `npm test`: runs the suite (test/*.test.mjs) against real servers, after
// `npm run build`. The server is PROGRESSDB_BIN when set; otherwise it is
// built with go from the repository this package sits in, into a temporary
// folder, with the certificates of the TLS tests, so that a fresh clone
// runs every test instead of skipping them. Arguments are passed to
// `node --test` (npm test -- --test-name-pattern=TLS).
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = dirname(dirname(fileURLToPath(import.meta.url)));
const root = resolve(pkg, "..", "..");
const env = { ...process.env };
let work;

function fail(msg) {
  console.error(`npm test: ${msg}`);
  if (work) rmSync(work, { recursive: true, force: true });
  process.exit(1);
}

/** Whether root is the progressdb repository (its go.mod names the module). */
function inRepository() {
  const mod = join(root, "go.mod");
  return existsSync(mod) && /^module github\.com\/progressdb\/progressdb\s*$/m.test(readFileSync(mod, "utf8"));
}

/** Whether go runs here; a go that fails for another reason fails the run. */
function haveGo() {
  const r = spawnSync("go", ["version"], { stdio: ["ignore", "ignore", "inherit"] });
  if (r.error?.code === "ENOENT") return false;
  if (r.error || r.status !== 0) fail(`go version: ${r.error ?? `exit status ${r.status}`}`);
  return true;
}

const needBin = !env.PROGRESSDB_BIN;
const needPKI = !env.PROGRESSDB_TEST_PKI;
if (needBin || needPKI) {
  const why = `set PROGRESSDB_BIN to a progressdb binary (make build writes bin/progressdb) to test against it`;
  const repo = inRepository();
  const goOK = repo && haveGo();
  if (needBin && !repo) fail(`PROGRESSDB_BIN is not set and ${root} is not the progressdb repository to build it from: ${why}`);
  if (needBin && !goOK) fail(`PROGRESSDB_BIN is not set and go is not on PATH to build the server (the version go.mod names, https://go.dev/dl/): install it, or ${why}`);
  if (goOK) {
    work = mkdtempSync(join(tmpdir(), "progressdb-npm-test-"));
    const bin = join(work, "bin") + "/";
    const pkgs = [...(needBin ? ["./server/cmd/progressdb"] : []), ...(needPKI ? ["./internal/testpki/cmd/testpki"] : [])];
    console.error(`npm test: go build ${pkgs.join(" ")}`);
    const b = spawnSync("go", ["build", "-o", bin, ...pkgs], { cwd: root, stdio: "inherit" });
    if (b.error || b.status !== 0) fail(`go build in ${root}: ${b.error ?? `exit status ${b.status}`}`);
    if (needBin) env.PROGRESSDB_BIN = join(bin, "progressdb");
    if (needPKI) {
      env.PROGRESSDB_TEST_PKI = join(work, "pki");
      const p = spawnSync(join(bin, "testpki"), [env.PROGRESSDB_TEST_PKI], { stdio: "inherit" });
      if (p.error || p.status !== 0) fail(`testpki: ${p.error ?? `exit status ${p.status}`}`);
    }
  } else {
    console.error("npm test: go is not on PATH: the TLS tests skip without PROGRESSDB_TEST_PKI (a folder of testpki's certificates)");
  }
}
if (!env.PROGRESSDB_EXAMPLES && existsSync(join(root, "examples", "typescript", "example.ts"))) {
  env.PROGRESSDB_EXAMPLES = join(root, "examples", "typescript");
}

const files = readdirSync(join(pkg, "test"))
  .filter((f) => f.endsWith(".test.mjs"))
  .map((f) => join("test", f));
const r = spawnSync(process.execPath, ["--test", ...process.argv.slice(2), ...files], { cwd: pkg, env, stdio: "inherit" });
if (work) rmSync(work, { recursive: true, force: true });
if (r.error) fail(`node --test: ${r.error}`);
process.exit(r.status ?? 1);
