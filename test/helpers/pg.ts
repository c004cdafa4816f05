/**
 * A PostgreSQL database of its own on the local server (127.0.0.1:5432, trust auth): `pgstore_<random>`, created for
 * one test file and dropped afterwards. Never touches other databases.
 */
import { randomBytes } from "crypto";
import { Client } from "pg";
import { requireServer } from "./platform";

export const PG_BASE = "postgres://postgres@127.0.0.1:5432";

export interface TestDatabase {
	name: string;
	url: string;
	drop(): Promise<void>;
}

async function admin<T>(fn: (c: Client) => Promise<T>): Promise<T> {
	const c = new Client({ connectionString: `${PG_BASE}/test` });
	await c.connect();
	try {
		return await fn(c);
	} finally {
		await c.end();
	}
}

/** Undefined (with the SKIPPED message of requireServer) when the server does not answer. */
export async function testDatabase(): Promise<TestDatabase | undefined> {
	if (!(await requireServer("PostgreSQL", 5432))) return undefined;
	const name = `pgstore_${randomBytes(6).toString("hex")}`;
	await admin((c) => c.query(`create database ${name}`));
	return {
		name,
		url: `${PG_BASE}/${name}`,
		drop: () => admin((c) => c.query(`drop database if exists ${name} with (force)`)).then(() => undefined),
	};
}
