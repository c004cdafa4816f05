/**
 * DATA_DIR's own mode (runtime/config.ts privateDataDir, ensurePrivateDir): 0700 when new, and narrowed to 0700 at start
 * when an earlier version or an operator left it open (0755, or 0701: search for others). The one exception is for
 * the embedded PostgreSQL run as root (runtime/relational.ts): DATA_DIR's group is then that server's user's, with
 * search only (0710), kept only while it is the group of DATA_DIR/postgres; never a bit for others.
 */
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, statSync } from "fs";
import os from "os";
import path from "path";
import { privateDataDir, writePrivateJson } from "../../runtime/config";
import { postgresUser } from "../../runtime/pg-process";

const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
const modeOf = (dir: string) => (statSync(dir).mode & 0o777).toString(8);
let base: string;

beforeEach(() => {
	base = mkdtempSync(path.join(os.tmpdir(), "data-dir-mode-"));
});
afterEach(() => rmSync(base, { recursive: true, force: true }));

test("a new DATA_DIR is 0700", () => {
	const dir = path.join(base, "data");
	privateDataDir(dir);
	expect(modeOf(dir)).toBe("700");
});

test.each([
	["0755", 0o755],
	["0701", 0o701],
	["0711", 0o711],
	["0750", 0o750],
])("a DATA_DIR left %s is narrowed to 0700 at start, and stays so when a file is written", (_name, loose) => {
	const dir = path.join(base, "data");
	mkdirSync(dir);
	chmodSync(dir, loose);
	privateDataDir(dir);
	expect(modeOf(dir)).toBe("700");
	chmodSync(dir, loose);
	writePrivateJson(path.join(dir, "keys.json"), {});
	expect(modeOf(dir)).toBe("700");
});

(isRoot ? describe : describe.skip)("as root, with the embedded PostgreSQL", () => {
	test("DATA_DIR given to the server's group keeps search for that group only (0710); others lose theirs", () => {
		const { uid, gid } = postgresUser();
		const dir = path.join(base, "data");
		mkdirSync(path.join(dir, "postgres"), { recursive: true, mode: 0o700 });
		chownSync(path.join(dir, "postgres"), uid, gid);
		chownSync(dir, 0, gid);
		chmodSync(dir, 0o711);
		privateDataDir(dir);
		expect([modeOf(dir), statSync(dir).gid]).toEqual(["710", gid]);
		writePrivateJson(path.join(dir, "keys.json"), {});
		expect(modeOf(dir)).toBe("710");
	});

	test("the server's group without its data directory below is no reason: 0700", () => {
		const { gid } = postgresUser();
		const dir = path.join(base, "data");
		mkdirSync(dir);
		chownSync(dir, 0, gid);
		chmodSync(dir, 0o710);
		privateDataDir(dir);
		expect(modeOf(dir)).toBe("700");
	});
});
