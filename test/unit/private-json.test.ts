/**
 * runtime/config.ts writePrivateJson (keys, bootstrap credentials, the embedded PostgreSQL's password): another
 * process reading the file while it is rewritten sees a whole JSON document every time, never an empty or cut one
 * (a test reading bootstrap.json met `Unexpected end of JSON input`; a crash mid-write would leave the keys
 * unreadable), the file stays 0600, and no temporary file is left beside it.
 */
import { spawn } from "child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "fs";
import os from "os";
import path from "path";
import { writePrivateJson } from "../../runtime/config";

const ROOT = path.resolve(__dirname, "../..");

test("a reader in another process never sees a partial file while it is rewritten", async () => {
	const dir = mkdtempSync(path.join(os.tmpdir(), "private-json-"));
	const file = path.join(dir, "keys.json");
	try {
		writePrivateJson(file, { round: -1 });
		// The writer: 40 rewrites of a 4 MB document in a child process.
		const script = `const { writePrivateJson } = require(${JSON.stringify(path.join(ROOT, "runtime/config.ts"))});
			const pad = "x".repeat(4 * 1024 * 1024);
			for (let round = 0; round < 40; round++) writePrivateJson(${JSON.stringify(file)}, { round, pad });`;
		const child = spawn(process.execPath, ["--import", "tsx", "-e", script], { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] });
		let err = "";
		child.stderr!.on("data", (b) => (err += b));
		const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
		let running = true;
		void exited.then(() => (running = false));
		const bad: string[] = [];
		const rounds = new Set<number>();
		while (running) {
			const text = readFileSync(file, "utf8");
			try {
				rounds.add(JSON.parse(text).round);
			} catch {
				bad.push(`${text.length} bytes`);
			}
			await new Promise((r) => setImmediate(r));
		}
		expect({ code: await exited, err }).toEqual({ code: 0, err: "" });
		expect(bad).toEqual([]);
		expect(rounds.size).toBeGreaterThan(1);
		expect(JSON.parse(readFileSync(file, "utf8")).round).toBe(39);
		expect(statSync(file).mode & 0o777).toBe(0o600);
		expect(readdirSync(dir)).toEqual(["keys.json"]);
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
}, 60_000);

test("a file that cannot be replaced throws and leaves nothing beside it", () => {
	const dir = mkdtempSync(path.join(os.tmpdir(), "private-json-"));
	try {
		// A directory where the file should be: the rename fails.
		const file = path.join(dir, "taken");
		require("fs").mkdirSync(path.join(file, "inside"), { recursive: true });
		expect(() => writePrivateJson(file, { a: 1 })).toThrow();
		expect(readdirSync(dir)).toEqual(["taken"]);
		expect(existsSync(path.join(file, "inside"))).toBe(true);
	} finally {
		rmSync(dir, { recursive: true, force: true });
	}
});
