/** The worker pool that verifies bcrypt hashes of earlier versions (runtime/hash-workers.ts). */
import bcrypt from "bcryptjs";
import { HashWorkers } from "../../runtime/hash-workers";

let pool: HashWorkers;
beforeAll(() => {
	pool = new HashWorkers(2);
});
afterAll(() => pool.close());

describe("hash workers", () => {
	it("verifies standard bcrypt hashes made by the library: true for the right secret only", async () => {
		const hash = bcrypt.hashSync("correct horse", 6);
		await expect(pool.compare("correct horse", hash)).resolves.toBe(true);
		await expect(pool.compare("correct horsf", hash)).resolves.toBe(false);
		const legacy = bcrypt.hashSync("ünïcödé pass", 4);
		await expect(pool.compare("ünïcödé pass", legacy)).resolves.toBe(true);
		await expect(pool.compare("unicode pass", legacy)).resolves.toBe(false);
	});

	it("a tampered hash (one character of the digest, of the salt, or the cost) no longer verifies", async () => {
		const hash = bcrypt.hashSync("s3cret", 5);
		const swap = (i: number) => hash.slice(0, i) + (hash[i] === "a" ? "b" : "a") + hash.slice(i + 1);
		await expect(pool.compare("s3cret", swap(hash.length - 2))).resolves.toBe(false);
		await expect(pool.compare("s3cret", swap(10))).resolves.toBe(false);
		await expect(pool.compare("s3cret", hash.replace("$05$", "$06$"))).resolves.toBe(false);
	});

	it("a malformed hash rejects the job (verifySecret turns that into false) and the pool keeps working", async () => {
		await expect(pool.compare("x", "$2a$99$" + "a".repeat(53))).rejects.toThrow(/rounds/i);
		await expect(pool.compare("x", "$2a$10$short")).resolves.toBe(false);
		await expect(pool.compare("x", bcrypt.hashSync("x", 4))).resolves.toBe(true);
	});

	it("verifies off the event loop: timers keep firing while cost-10 comparisons run", async () => {
		const hash = bcrypt.hashSync("pw", 10);
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
		const hashes = secrets.map((s) => bcrypt.hashSync(s, 4));
		// Every other job gets the wrong secret: each answer must be its own job's.
		const jobs = secrets.map((s, i) => pool.compare(i % 2 ? "wrong" : s, hashes[i]));
		expect(pool.waiting).toBe(4);
		const results = await Promise.all(jobs);
		expect(pool.waiting).toBe(0);
		expect(results).toEqual(secrets.map((_, i) => i % 2 === 0));
	});

	it("a worker that dies fails its job only; the next job gets a new worker", async () => {
		const one = new HashWorkers(1);
		try {
			const job = one.compare("pw", bcrypt.hashSync("pw", 12));
			await one.close();
			await expect(job).rejects.toThrow(/exited/);
			await expect(one.compare("pw", bcrypt.hashSync("pw", 4))).resolves.toBe(true);
		} finally {
			await one.close();
		}
	});
});
