/**
 * Issue 34 item 1: one document store. PostgreSQL always; DOCUMENT_STORE may still say `postgres`; asking for NeDB or
 * MongoDB (DOCUMENT_STORE=nedb, MONGO_URI) refuses to start with what to do instead; a DATA_DIR holding the NeDB
 * document files of an earlier version refuses to start with the command that moves them (store-migration.ts).
 * No store is opened here.
 */
import { mkdirSync, rmSync, writeFileSync } from "fs";
import path from "path";
import { readConfig, StartupError } from "../../runtime/config";
import { healthBody } from "../../runtime/health";
import { nedbDocumentStores, unmigratedDataDir } from "../../store-migration";
import { startPlatform } from "../../platform";
import { tempDir } from "../helpers/platform";

const saved = { DOCUMENT_STORE: process.env.DOCUMENT_STORE, DATA_DIR: process.env.DATA_DIR, MONGO_URI: process.env.MONGO_URI };
let dir: string;
const file = (rel: string, content = '{"_id":"x"}\n') => {
	mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
	writeFileSync(path.join(dir, rel), content);
};

beforeEach(() => {
	dir = tempDir("store-choice-");
	delete process.env.DOCUMENT_STORE;
	delete process.env.MONGO_URI;
});
afterEach(() => {
	rmSync(dir, { recursive: true, force: true });
	for (const [k, v] of Object.entries(saved))
		if (v === undefined) delete process.env[k];
		else process.env[k] = v;
});

const refusal = (fn: () => unknown): { name?: string; message?: string } => {
	try {
		fn();
	} catch (err) {
		return { name: (err as Error).name, message: (err as Error).message };
	}
	return {};
};

test("DOCUMENT_STORE unset, empty or `postgres` (any case) reads; nedb, mongo or anything else refuses with what to do", () => {
	process.env.DATA_DIR = dir;
	for (const ok of [undefined, "", "postgres", "POSTGRES"]) {
		if (ok === undefined) delete process.env.DOCUMENT_STORE;
		else process.env.DOCUMENT_STORE = ok;
		expect(readConfig().dataDir).toBe(dir);
	}
	process.env.DOCUMENT_STORE = "nedb";
	expect(refusal(readConfig)).toEqual({
		name: "StartupError",
		message:
			"DOCUMENT_STORE=nedb: the NeDB store is not offered any more; documents live in PostgreSQL (DATABASE_URL, else embedded under DATA_DIR). Unset DOCUMENT_STORE; a DATA_DIR of NeDB files moves with `npm run migrate-store`",
	});
	for (const bad of ["mongo", "pg", "postgres ", "nedb;rm -rf /"]) {
		process.env.DOCUMENT_STORE = bad;
		expect(refusal(readConfig)).toEqual({ name: "StartupError", message: `DOCUMENT_STORE must be postgres (or unset), got ${bad}` });
	}
	delete process.env.DOCUMENT_STORE;
	process.env.MONGO_URI = "mongodb://127.0.0.1/x";
	expect(refusal(readConfig)).toEqual({
		name: "StartupError",
		message: "MONGO_URI is set: the MongoDB store is not offered any more; documents live in PostgreSQL (DATABASE_URL, else embedded under DATA_DIR). Unset MONGO_URI",
	});
});

test("a DATA_DIR holding NeDB documents refuses to start, naming the command; nothing of it is touched", async () => {
	file("content/notes.db");
	expect(nedbDocumentStores(dir)).toEqual(["content/notes"]);
	file("_seed.db");
	expect(nedbDocumentStores(dir)).toEqual(["content/notes", "_seed"]);
	const why = unmigratedDataDir(dir)!;
	expect(why).toBe(
		`DATA_DIR ${dir} holds the NeDB documents of an earlier version, which this version does not read (documents live in PostgreSQL): ` +
			"stop, run `npm run migrate-store` with the same DATA_DIR (and DATABASE_URL, if the documents go to a server), then start again " +
			'(docs/production.md, "From NeDB to PostgreSQL")',
	);
	await expect(startPlatform({ dataDir: dir, port: 0, logLevel: "error" })).rejects.toEqual(new StartupError(why));
	// Refused before the directory is taken or a store started: no lock socket, no embedded PostgreSQL.
	expect(require("fs").readdirSync(dir).sort()).toEqual(["_seed.db", "content"]);
});

test("what is not NeDB documents does not count: consumer positions, empty files, directories, other .db files", () => {
	file("_stream_offsets.db"); // positions only
	file("_relay_offsets.db");
	file("identity/users.db", ""); // compacted to nothing
	mkdirSync(path.join(dir, "content", "notes.db"), { recursive: true });
	file("files/ab/cd.db"); // a blob named so
	file("unknown/things.db"); // no collection of the catalog
	file("escape.db"); // a top-level name of no store
	expect(nedbDocumentStores(dir)).toEqual([]);
	expect(unmigratedDataDir(dir)).toBeUndefined();
});

test("a health entry carries the kind of what serves it, and only where one is given", () => {
	expect(healthBody({ "document store": true, cache: false }, { "document store": "postgres" })).toEqual({
		status: "error",
		info: { "document store": { status: "up", kind: "postgres" }, cache: { status: "down" } },
	});
	expect(healthBody({ "document store": false }, { "document store": undefined })).toEqual({ status: "error", info: { "document store": { status: "down" } } });
});
