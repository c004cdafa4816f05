/** The bcrypt worker pool (lib/hash-workers.ts) and the rehash rule of stored secrets (lib/crypto.ts needsRehash). */
import bcrypt from "bcryptjs";
import { HashWorkers } from "../../lib/hash-workers";
import { BCRYPT_COST, needsRehash } from "../../lib/crypto";

let pool: HashWorkers;
beforeAll(() => {
	pool = new HashWorkers(2);
});
afterAll(() => pool.close());

describe("hash workers", () => {
	it("hash → standard bcrypt at the given cost that the library itself verifies; compare is true for the right secret only", async () => {
		const hash = await pool.hash("correct horse", 6);
		expect(hash).toMatch(/^\$2b\$06\$[./A-Za-z0-9]{53}$/);
		expect(bcrypt.compareSync("correct horse", hash)).toBe(true);
		await expect(pool.compare("correct horse", hash)).resolves.toBe(true);
		await expect(pool.compare("correct horsf", hash)).resolves.toBe(false);
	});

	it("verifies hashes made by the library in this thread (data of earlier versions)", async () => {
		const legacy = bcrypt.hashSync("ünïcödé pass", 4);
		await expect(pool.compare("ünïcödé pass", legacy)).resolves.toBe(true);
		await expect(pool.compare("unicode pass", legacy)).resolves.toBe(false);
	});

	it("a tampered hash (one character of the digest, of the salt, or the cost) no longer verifies", async () => {
		const hash = await pool.hash("s3cret", 5);
		const swap = (i: number) => hash.slice(0, i) + (hash[i] === "a" ? "b" : "a") + hash.slice(i + 1);
		await expect(pool.compare("s3cret", swap(hash.length - 2))).resolves.toBe(false);
		await expect(pool.compare("s3cret", swap(10))).resolves.toBe(false);
		await expect(pool.compare("s3cret", hash.replace("$05$", "$06$"))).resolves.toBe(false);
	});

	it("a malformed hash rejects the job (verifySecret turns that into false) and the pool keeps working", async () => {
		await expect(pool.hash("x", 99)).rejects.toThrow("bcrypt cost 99 is outside 4..31");
		await expect(pool.compare("x", "$2a$99$" + "a".repeat(53))).rejects.toThrow(/rounds/i);
		await expect(pool.compare("x", "$2a$10$short")).resolves.toBe(false);
		await expect(pool.compare("x", await pool.hash("x", 4))).resolves.toBe(true);
	});

	it("hashes off the event loop: timers keep firing while cost-10 comparisons run", async () => {
		const hash = bcrypt.hashSync("pw", BCRYPT_COST);
		let ticks = 0;
		const timer = setInterval(() => ticks++, 5);
		const t0 = Date.now();
		await Promise.all([pool.compare("pw", hash), pool.compare("nope", hash), pool.compare("pw", hash)]);
		const ms = Date.now() - t0;
		clearInterval(timer);
		// In-thread bcryptjs would give 0 or 1 tick for the whole batch; here the loop runs at about 5 ms a tick.
		expect({ ms, ticks, responsive: ticks >= Math.floor(ms / 25) && ticks >= 3 }).toMatchObject({ responsive: true });
	});

	it("runs as many jobs at once as it has workers, queues the rest and answers every job with its own result", async () => {
		const secrets = Array.from({ length: 6 }, (_, i) => `secret-${i}`);
		const jobs = secrets.map((s) => pool.hash(s, 4));
		expect(pool.waiting).toBe(4);
		const hashes = await Promise.all(jobs);
		expect(pool.waiting).toBe(0);
		expect(hashes.map((h, i) => bcrypt.compareSync(secrets[i], h))).toEqual(secrets.map(() => true));
	});

	it("a worker that dies fails its job only; the next job gets a new worker", async () => {
		const one = new HashWorkers(1);
		try {
			const job = one.hash("pw", 12);
			await one.close();
			await expect(job).rejects.toThrow(/exited/);
			await expect(one.compare("pw", bcrypt.hashSync("pw", 4))).resolves.toBe(true);
		} finally {
			await one.close();
		}
	});
});

describe("needsRehash", () => {
	it("is true for bcrypt below today's cost only", () => {
		expect(BCRYPT_COST).toBe(10);
		expect(needsRehash(bcrypt.hashSync("x", 4))).toBe(true);
		expect(needsRehash("$2a$09$" + "a".repeat(53))).toBe(true);
		expect(needsRehash(bcrypt.hashSync("x", 10))).toBe(false);
		expect(needsRehash("$2b$12$" + "a".repeat(53))).toBe(false);
		for (const h of ["", "garbage", "$2b$xx$abc"]) expect(needsRehash(h)).toBe(false);
	});
});
