/** Raw MQTT bytes for the suites that talk to the broker below the client library (oversized and slow packets). */

/** The fixed header of a CONNECT (0x10) whose remaining length is `n`, as MQTT's variable byte integer. */
export function connectHeader(n: number): Buffer {
	const len: number[] = [];
	do {
		let b = n % 128;
		n = Math.floor(n / 128);
		if (n > 0) b |= 0x80;
		len.push(b);
	} while (n > 0);
	return Buffer.from([0x10, ...len]);
}
