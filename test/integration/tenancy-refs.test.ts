/**
 * `ref` unique per tenant (CONTRACTS.md "Tenants") on data written before the rule: a stored document with a `ref`
 * but no derived `tenant_ref` gets its key at start, so a duplicate in its tenant still answers 409.
 */
import { mkdirSync, writeFileSync } from "fs";
import path from "path";
import { bootPlatform, tempDir, type TestPlatform } from "../helpers/platform";
import { objectId } from "../../lib/crypto";

let p: TestPlatform;
const ROOT_CLIENT = objectId();
const LEGACY = objectId();

beforeAll(async () => {
	const dataDir = tempDir();
	mkdirSync(path.join(dataDir, "content"), { recursive: true });
	// A note of the root tenant as the earlier engine stored it: `ref` only, under a unique `ref` index.
	const now = new Date().toISOString();
	const doc = { _id: LEGACY, title: "legacy", ref: "OLD-1", owner: "x", clients: [ROOT_CLIENT], shares: [], groups: [], version: "1.0.0", created_at: now, updated_at: now, deleted_at: null };
	writeFileSync(
		path.join(dataDir, "content", "notes.db"),
		`${JSON.stringify({ $$indexCreated: { fieldName: "ref", unique: true, sparse: true } })}\n${JSON.stringify(doc)}\n`,
	);
	p = await bootPlatform({ dataDir, rootClientId: ROOT_CLIENT });
}, 60_000);

afterAll(async () => {
	await p?.cleanup();
});

test("a legacy ref still answers 409 in its tenant and is found by ref", async () => {
	const root = await p.rootToken();
	const dup = await p.http("POST", "/content/notes", { token: root, body: { title: "again", ref: "OLD-1" } });
	expect(dup.status).toBe(409);
	expect(dup.body).toEqual({ statusCode: 409, message: "ref already exists", error: "Conflict" });
	const got = await p.http("GET", "/content/notes/OLD-1?ref=true&zone=client", { token: root });
	expect(got.status).toBe(200);
	expect(got.body.data.id).toBe(LEGACY);
	expect(got.body.data).not.toHaveProperty("tenant_ref");
});
