/** Free ports for tests: a gateway PORT, and an OPS_PORT_OFFSET whose shifted spec ports are all free. */
import { readFileSync } from "fs";
import net from "net";
import { DOMAINS } from "../../catalog";

/** A port the OS considers free right now (bound to 0, read, released). */
export function freePort(): Promise<number> {
	return new Promise((resolve, reject) => {
		const s = net.createServer();
		s.unref();
		s.once("error", reject);
		s.listen(0, "127.0.0.1", () => {
			const port = (s.address() as net.AddressInfo).port;
			s.close(() => resolve(port));
		});
	});
}

function portIsFree(port: number): Promise<boolean> {
	return new Promise((resolve) => {
		const s = net.createServer();
		s.unref();
		s.once("error", () => resolve(false));
		s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
	});
}

/** Spec ports of the domains (3020..3150): what an ops offset must keep clear. */
export const DOMAIN_SPEC_PORTS = DOMAINS.map((d) => d.restPort);

/** Lowest port the kernel hands out for outgoing connections (and port 0): shifted ops ports stay below it. */
function ephemeralLow(): number {
	try {
		return Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || 32768;
	} catch {
		return 32768;
	}
}

/**
 * An OPS_PORT_OFFSET (random, from 20000) such that every given spec port plus the offset is free and below the
 * ephemeral range: a port free when checked could otherwise be taken by any outgoing connection before the node
 * binds it (seen as EADDRINUSE under a full suite). Tests never bind the standard ports of anything else and
 * parallel runs rarely meet.
 */
export async function freeOpsOffset(specPorts: number[] = DOMAIN_SPEC_PORTS): Promise<number> {
	const span = Math.max(1000, ephemeralLow() - Math.max(...specPorts, 4070) - 20000 - 2);
	for (let attempt = 0; attempt < 50; attempt++) {
		const offset = 20000 + Math.floor(Math.random() * span);
		const free = await Promise.all(specPorts.map((p) => portIsFree(p + offset)));
		if (free.every(Boolean)) return offset;
	}
	throw new Error("no free ops port offset found");
}
