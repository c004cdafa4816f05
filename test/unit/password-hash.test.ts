/**
 * Password and client-secret hashes (runtime/password-hash.ts): Argon2id with today's parameters for new hashes, bcrypt hashes
 * of earlier versions still verified (on the hash workers), and the rule that decides which stored hashes a login replaces.
 */
import * as argon2 from "@node-rs/argon2";
import bcrypt from "bcryptjs";
import { promises as fs } from "fs";
import { ARGON2_CONCURRENCY, ARGON2_LANES, ARGON2_MEMORY_KIB, ARGON2_PASSES, hashSecret, needsRehash, verifySecret } from "../../runtime/password-hash";
import { hashWorkers } from "../../runtime/hash-workers";

afterAll(() => hashWorkers().close());

// The library's own verification, watched: a refused hash must never reach it.
jest.mock("@node-rs/argon2", () => {
	const actual = jest.requireActual("@node-rs/argon2");
	return { ...actual, verify: jest.fn((...args: unknown[]) => actual.verify(...args)) };
});
const argon2Verify = argon2.verify as unknown as jest.Mock;

const threads = async () => Number(/^Threads:\s+(\d+)$/m.exec(await fs.readFile("/proc/self/status", "utf8"))![1]);
/** An argon2id hash of `plain` made by the library itself with other parameters. */
const argon2id = (plain: string, memoryCost: number, timeCost: number, parallelism = 1) =>
	argon2.hash(plain, { algorithm: argon2.Algorithm.Argon2id, memoryCost, timeCost, parallelism });

// First in the file: nothing here has verified a bcrypt hash yet.
test("argon2id hashing, verification and rejected strings start no worker thread; the first bcrypt verification starts one", async () => {
	const hash = await hashSecret("warm-up");
	await verifySecret("warm-up", hash);
	const before = await threads();
	await expect(verifySecret("warm-up", await hashSecret("warm-up"))).resolves.toBe(true);
	for (const junk of ["", "garbage", "$2a$10$short", "$argon2i$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0$" + "a".repeat(43)])
		await expect(verifySecret("x", junk)).resolves.toBe(false);
	expect(await threads()).toBe(before);
	await expect(verifySecret("old", bcrypt.hashSync("old", 4))).resolves.toBe(true);
	expect(await threads()).toBe(before + 1);
});

describe("new hashes", () => {
	it("are argon2id, version 19, with exactly today's parameters, a 16-byte salt and a 32-byte digest", async () => {
		expect({ m: ARGON2_MEMORY_KIB, t: ARGON2_PASSES, p: ARGON2_LANES }).toEqual({ m: 19456, t: 2, p: 1 });
		const hash = await hashSecret("correct horse");
		expect(hash).toMatch(/^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$/);
		expect(argon2.parseOptions(hash)).toEqual({
			algorithm: argon2.Algorithm.Argon2id,
			version: argon2.Version.V0x13,
			memoryCost: 19456,
			timeCost: 2,
			parallelism: 1,
			outputLen: 32,
			saltLen: 16,
		});
		// The library itself verifies it (a standard PHC string, nothing of our own in it).
		await expect(argon2.verify(hash, "correct horse")).resolves.toBe(true);
		expect(needsRehash(hash)).toBe(false);
	});

	it("verify the right secret only; the same secret hashes differently each time (random salt)", async () => {
		const [a, b] = await Promise.all([hashSecret("correct horse"), hashSecret("correct horse")]);
		expect(a).not.toBe(b);
		for (const h of [a, b]) {
			await expect(verifySecret("correct horse", h)).resolves.toBe(true);
			await expect(verifySecret("correct horsf", h)).resolves.toBe(false);
			await expect(verifySecret("", h)).resolves.toBe(false);
		}
		const unicode = await hashSecret("ünïcödé pass");
		await expect(verifySecret("ünïcödé pass", unicode)).resolves.toBe(true);
		await expect(verifySecret("unicode pass", unicode)).resolves.toBe(false);
	});

	it("a tampered hash (digest, salt or a parameter) no longer verifies", async () => {
		const hash = await hashSecret("s3cret");
		const swap = (i: number) => hash.slice(0, i) + (hash[i] === "A" ? "B" : "A") + hash.slice(i + 1);
		const salt = hash.indexOf("$", hash.indexOf("p=1")) + 3;
		await expect(verifySecret("s3cret", swap(hash.length - 5))).resolves.toBe(false);
		await expect(verifySecret("s3cret", swap(salt))).resolves.toBe(false);
		await expect(verifySecret("s3cret", hash.replace("t=2", "t=3"))).resolves.toBe(false);
		await expect(verifySecret("s3cret", hash.replace("m=19456", "m=19457"))).resolves.toBe(false);
	});

	it(`run at most ${ARGON2_CONCURRENCY} at once on libuv's pool: a file read issued behind a burst of hashes is not queued behind them`, async () => {
		const order: string[] = [];
		const hashes = Array.from({ length: 8 }, (_, i) => hashSecret(`burst-${i}`).then(() => order.push("hash")));
		await fs.readFile(__filename).then(() => order.push("read"));
		await Promise.all(hashes);
		// Without the bound the 8 hashes take libuv's 4 threads and the read's steps queue behind the other 4: at least
		// 4 hashes end first. With it the read runs beside the first ones (on a busy machine a first pair may end first).
		expect(order.indexOf("read")).toBeLessThan(4);
		expect(order).toHaveLength(9);
	});
});

describe("bcrypt hashes of earlier versions", () => {
	it("$2a$, $2b$ and $2y$ verify the right secret only", async () => {
		const b = bcrypt.hashSync("legacy pass", 5);
		for (const h of [b, b.replace("$2b$", "$2a$"), b.replace("$2b$", "$2y$")]) {
			await expect(verifySecret("legacy pass", h)).resolves.toBe(true);
			await expect(verifySecret("legacy pasS", h)).resolves.toBe(false);
		}
	});
});

describe("malformed and unsupported stored hashes", () => {
	it("are false and never throw", async () => {
		const good = await hashSecret("x");
		const junk: unknown[] = [
			"",
			"garbage",
			"$2a$10$short",
			"$2a$99$" + "a".repeat(53),
			good.slice(0, -1),
			good + "$",
			good.replace("$v=19$", "$v=16$"),
			good.replace("$argon2id$", "$argon2i$"),
			good.replace("$argon2id$", "$argon2d$"),
			good.replace("m=19456", "m=0"),
			good.replace("p=1", "p=0"),
			"$argon2id$v=19$m=19456,t=2,p=1$$",
			null,
			7,
			{},
		];
		for (const hash of junk) await expect(verifySecret("x", hash as string)).resolves.toBe(false);
		await expect(verifySecret(undefined as unknown as string, good)).resolves.toBe(false);
		await expect(verifySecret(7 as unknown as string, good)).resolves.toBe(false);
	});

	it("asking for far more memory, passes or lanes than today's: refused, never computed (its cost: bench/micro.ts)", async () => {
		const good = await hashSecret("x");
		const computed = argon2Verify.mock.calls.length;
		for (const huge of [good.replace("m=19456", "m=4194304"), good.replace("t=2", "t=100000"), good.replace("p=1", "p=255")])
			await expect(verifySecret("x", huge)).resolves.toBe(false);
		expect(argon2Verify.mock.calls.length).toBe(computed);
		// Today's parameters are computed (the spy sees them).
		await expect(verifySecret("x", good)).resolves.toBe(true);
		expect(argon2Verify.mock.calls.length).toBe(computed + 1);
	});
});

describe("needsRehash", () => {
	it("is true for every bcrypt hash, whatever its cost", () => {
		expect(needsRehash(bcrypt.hashSync("x", 4))).toBe(true);
		expect(needsRehash(bcrypt.hashSync("x", 10))).toBe(true);
		expect(needsRehash("$2a$12$" + "a".repeat(53))).toBe(true);
		expect(needsRehash("$2y$10$" + "a".repeat(53))).toBe(true);
	});

	it("is true for an argon2id hash below today's memory or passes, false at or above them", async () => {
		expect(needsRehash(await argon2id("x", 4096, 3))).toBe(true);
		expect(needsRehash(await argon2id("x", 19456, 1))).toBe(true);
		expect(needsRehash(await argon2id("x", 19455, 2))).toBe(true);
		expect(needsRehash(await argon2id("x", 19456, 2))).toBe(false);
		expect(needsRehash(await argon2id("x", 24576, 2, 2))).toBe(false);
		expect(needsRehash(await argon2id("x", 19456, 3))).toBe(false);
	});

	it("is false for anything that is no hash it could verify", () => {
		for (const h of ["", "garbage", "$2b$xx$abc", "$argon2i$v=19$m=4096,t=3,p=1$c2FsdHNhbHRzYWx0$" + "a".repeat(43), null, 7]) expect(needsRehash(h as string)).toBe(false);
	});
});
