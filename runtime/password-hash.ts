/**
 * Password and client-secret hashes (docs/security.md, "Password hashing"): Argon2id on libuv's thread pool, at most
 * ARGON2_CONCURRENCY at once, and the bcrypt hashes of earlier versions verified on the hash worker threads
 * (runtime/hash-workers.ts). Machinery, not a rule: it holds a queue and threads, so it lives in runtime/.
 */
import * as argon2 from "@node-rs/argon2";
import os from "os";
import { hashWorkers } from "./hash-workers";
/**
 * Argon2id parameters of new password and client-secret hashes (docs/security.md, "Password hashing"): 19 MiB of
 * memory, 2 passes, 1 lane. Stored hashes below any of them, and every bcrypt hash, are replaced at the holder's next
 * successful login (needsRehash, runtime/rehash.ts).
 */
export const ARGON2_MEMORY_KIB = 19456;
export const ARGON2_PASSES = 2;
export const ARGON2_LANES = 1;
/**
 * Stored argon2id hashes above these are refused (verifySecret answers false) rather than computed: a stored string
 * asking for gigabytes or thousands of passes would tie up memory and the thread pool for as long as it says.
 */
const ARGON2_MAX_MEMORY_KIB = 16 * ARGON2_MEMORY_KIB;
const ARGON2_MAX_PASSES = 16;
const ARGON2_MAX_LANES = 8;

/**
 * Argon2id hashes at once, at most: each runs on libuv's thread pool (UV_THREADPOOL_SIZE, 4 unless set), which file
 * system calls and dns.lookup share; one thread is always left to them, and more hashes than cores would only share
 * the same cores. The rest wait here, in order.
 */
export const ARGON2_CONCURRENCY = Math.max(1, Math.min(os.availableParallelism(), (Number(process.env.UV_THREADPOOL_SIZE) || 4) - 1));

// $argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<digest>, unpadded standard base64 (the PHC string format).
const ARGON2ID = /^\$argon2id\$v=19\$m=(\d{1,10}),t=(\d{1,10}),p=(\d{1,3})\$[A-Za-z0-9+/]{11,}\$[A-Za-z0-9+/]{22,}$/;
// $2a$/$2b$/$2y$<cost>$<53 characters>: the bcrypt hashes of earlier versions, verified on the hash workers.
const BCRYPT = /^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$/;

function argon2Params(hash: string): { m: number; t: number; p: number } | null {
	const x = ARGON2ID.exec(hash);
	return x && { m: Number(x[1]), t: Number(x[2]), p: Number(x[3]) };
}

/** Runs at most `size` jobs at once; the others start in arrival order as running ones settle. */
class Slots {
	private running = 0;
	private readonly waiting: Array<() => void> = [];

	constructor(private readonly size: number) {}

	async run<T>(job: () => Promise<T>): Promise<T> {
		if (this.running >= this.size) await new Promise<void>((go) => this.waiting.push(go));
		else this.running++;
		try {
			return await job();
		} finally {
			// The slot passes straight to the next job waiting, if any.
			const next = this.waiting.shift();
			if (next) next();
			else this.running--;
		}
	}
}

const argon2Slots = new Slots(ARGON2_CONCURRENCY);
const ARGON2ID_ALGORITHM = argon2.Algorithm.Argon2id;

/** Argon2id with today's parameters and a random 16-byte salt, on libuv's thread pool, off the event loop. */
export function hashSecret(plain: string): Promise<string> {
	return argon2Slots.run(() => argon2.hash(plain, { algorithm: ARGON2ID_ALGORITHM, memoryCost: ARGON2_MEMORY_KIB, timeCost: ARGON2_PASSES, parallelism: ARGON2_LANES }));
}

/**
 * A hash made with weaker parameters than today's: any bcrypt hash, or an argon2id one with less memory, fewer passes
 * or fewer lanes. Its holder's next successful login stores a new one (runtime/rehash.ts). False for anything else (a
 * string that is no hash never verifies, so there is nothing to replace).
 */
export function needsRehash(hash: string): boolean {
	if (typeof hash !== "string") return false;
	if (BCRYPT.test(hash)) return true;
	const a = argon2Params(hash);
	return !!a && (a.m < ARGON2_MEMORY_KIB || a.t < ARGON2_PASSES || a.p < ARGON2_LANES);
}

/**
 * Verifies against an argon2id hash, or a bcrypt one of earlier versions (on the hash workers, which start only then).
 * false on mismatch and on any other input; never throws (a bad stored hash must not 500).
 */
export async function verifySecret(plain: string, hash: string): Promise<boolean> {
	if (typeof plain !== "string" || typeof hash !== "string") return false;
	try {
		const a = argon2Params(hash);
		if (a) {
			if (a.m > ARGON2_MAX_MEMORY_KIB || a.t > ARGON2_MAX_PASSES || a.p > ARGON2_MAX_LANES) return false;
			return await argon2Slots.run(() => argon2.verify(hash, plain));
		}
		return BCRYPT.test(hash) && (await hashWorkers().compare(plain, hash));
	} catch {
		return false;
	}
}
