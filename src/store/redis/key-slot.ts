/**
 * Redis Cluster's key slot: CRC16 (XMODEM) of the key's hash tag (the text
 * between its first `{` and the next `}`, when not empty) or of the whole
 * key, mod 16384, as the cluster specification defines it. The store needs
 * it to open a WAIT session on the primary that holds a key.
 */

const TABLE = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let crc = i << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
    table[i] = crc & 0xffff;
  }
  return table;
})();

export const SLOTS = 16384;

export function keySlot(key: string): number {
  let bytes = Buffer.from(key, "utf8");
  const open = bytes.indexOf(0x7b); // {
  if (open !== -1) {
    const close = bytes.indexOf(0x7d, open + 1); // }
    if (close > open + 1) bytes = bytes.subarray(open + 1, close);
  }
  return crc16(bytes) % SLOTS;
}

/** CRC16 (XMODEM), the cluster specification's. */
export function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) crc = ((crc << 8) ^ (TABLE[((crc >> 8) ^ byte) & 0xff] ?? 0)) & 0xffff;
  return crc;
}

let tags: string[] | undefined;

/**
 * For each slot s, a short hash tag whose key slot is s ("m<n>", the
 * smallest n that lands there), so a key can be placed in any slot. About
 * 10^5 CRCs, once per process.
 */
export function slotTags(): readonly string[] {
  if (tags !== undefined) return tags;
  const found: (string | undefined)[] = new Array(SLOTS);
  let left = SLOTS;
  for (let n = 0; left > 0; n++) {
    const tag = `m${n}`;
    const slot = keySlot(tag);
    if (found[slot] === undefined) {
      found[slot] = tag;
      left--;
    }
  }
  tags = found.map((t) => t ?? "");
  return tags;
}
