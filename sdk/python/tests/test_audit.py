"""jobsvc.audit, the offline verifier of the audit log (docs/audit.md): known-answer vectors of
RFC 8785, RFC 8032 and RFC 6962, every proof of every tree up to 70 leaves, and the tampering a
verifier exists to catch, each refused with its reason. No service is needed."""

import base64
import inspect
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import typing
import unittest

from jobsvc import audit
from jobsvc.audit import AuditVerificationError, _ed25519, canonical_json, leaf_hash, node_hash, verify_consistency, verify_inclusion

from . import audit_fixtures as fx
from .audit_fixtures import PROJECT, Signer, Tree, keys_document, resign

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = shutil.which("node")


def h(text):
    return bytes.fromhex(text)


def node(script, stdin):
    """Runs a node script (node:crypto, JSON.stringify: what the service itself runs) on a JSON
    input and returns its JSON output."""
    done = subprocess.run([NODE, "-e", script], input=json.dumps(stdin), capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


class CanonicalJsonTest(unittest.TestCase):
    def test_rfc8785_section_3_2_2_example(self):
        value = json.loads(
            '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
            ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/", "literals": [null, true, false]}'
        )
        self.assertEqual(
            canonical_json(value),
            '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
        )

    def test_rfc8785_section_3_2_3_sorts_keys_by_utf16_code_units(self):
        value = json.loads('{"\\u20ac": "Euro Sign", "\\r": "Carriage Return", "\\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One",'
                           ' "\\ud83d\\ude00": "Emoji: Grinning Face", "\\u0080": "Control", "\\u00f6": "Latin Small Letter O With Diaeresis"}')  # fmt: skip
        text = canonical_json(value)
        self.assertEqual([key for key in json.loads(text)], ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001F600", "\ufb33"])
        self.assertEqual(
            text,
            '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",'
            '"\u20ac":"Euro Sign","\U0001F600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}',
        )
        # Python's code-point order would put U+1F600 after U+FB33.
        self.assertLess(sorted(value).index("\ufb33"), sorted(value).index("\U0001F600"))

    def test_rfc8785_appendix_b_numbers(self):
        for bits, text in [
            ("0000000000000000", "0"),
            ("8000000000000000", "0"),
            ("0000000000000001", "5e-324"),
            ("8000000000000001", "-5e-324"),
            ("7fefffffffffffff", "1.7976931348623157e+308"),
            ("ffefffffffffffff", "-1.7976931348623157e+308"),
            ("4340000000000000", "9007199254740992"),
            ("c340000000000000", "-9007199254740992"),
            ("4430000000000000", "295147905179352830000"),
            ("44b52d02c7e14af5", "9.999999999999997e+22"),
            ("44b52d02c7e14af6", "1e+23"),
            ("44b52d02c7e14af7", "1.0000000000000001e+23"),
            ("444b1ae4d6e2ef4e", "999999999999999700000"),
            ("444b1ae4d6e2ef4f", "999999999999999900000"),
            ("444b1ae4d6e2ef50", "1e+21"),
            ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
            ("3eb0c6f7a0b5ed8d", "0.000001"),
            ("41b3de4355555553", "333333333.3333332"),
            ("41b3de4355555554", "333333333.33333325"),
            ("41b3de4355555555", "333333333.3333333"),
            ("41b3de4355555556", "333333333.3333334"),
            ("41b3de4355555557", "333333333.33333343"),
            ("becbf647612f3696", "-0.0000033333333333333333"),
            ("43143ff3c1cb0959", "1424953923781206.2"),
        ]:
            with self.subTest(bits):
                self.assertEqual(canonical_json(struct.unpack(">d", h(bits))[0]), text)
        for value in (float("nan"), float("inf"), float("-inf")):
            with self.assertRaises(ValueError):
                canonical_json([value])

    def test_numbers_as_javascript_writes_them(self):
        self.assertEqual(canonical_json([1.0, 1e-07, 1e21, 1e20, 123456789012345680000.0, -0.0, 0.1, 100, -7, True, None]),
                         "[1,1e-7,1e+21,100000000000000000000,123456789012345680000,0,0.1,100,-7,true,null]")  # fmt: skip
        # Integers a double holds are written as they are; beyond 2**53 as the double the service holds.
        self.assertEqual(canonical_json([2**53, -(2**53), 2**60, 10**21, 12345678901234567890]),
                         "[9007199254740992,-9007199254740992,1152921504606847000,1e+21,12345678901234567000]")  # fmt: skip
        with self.assertRaises(ValueError):
            canonical_json(10**400)

    def test_strings_as_json_stringify_writes_them(self):
        self.assertEqual(canonical_json('"\\/\b\f\n\r\t\x00\x01\x1f\x7f\u2028é😀'), '"\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u0001\\u001f\x7f\u2028é😀"')
        # Lone surrogates as lower-case escapes; a pair held as two code points is its character.
        self.assertEqual(canonical_json(["\ud800", "a\udfffb", "\ud83d\ude00", "\ude00\ud83d"]), '["\\ud800","a\\udfffb","😀","\\ude00\\ud83d"]')
        self.assertEqual(canonical_json(json.loads('"\\uDBFF"')), '"\\udbff"')

    def test_refuses_what_json_cannot_hold(self):
        with self.assertRaises(TypeError):
            canonical_json({1: "a"})
        with self.assertRaises(TypeError):
            canonical_json({"a": b"bytes"})

    @unittest.skipUnless(NODE, "node runs JSON.stringify, the service's own writer")
    def test_agrees_with_json_stringify_on_random_values(self):
        rng = random.Random(8785)
        numbers = []
        while len(numbers) < 3000:
            value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            if math.isfinite(value):
                numbers.append(value)
        numbers += [rng.uniform(-1e6, 1e6) for _ in range(500)] + [float(rng.randint(-(10**25), 10**25)) for _ in range(500)]
        numbers += [rng.random() * 10 ** rng.randint(-30, 30) for _ in range(500)]
        alphabet = ["a", "Z", "0", '"', "\\", "/", "\b", "\x00", "\x1f", "\x7f", "\x80", "é", "\u2028", "\ud800", "\udc00", "\ufb33", "\uffff", "😀", "\U0010ffff"]
        objects = [{"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))): rng.choice(numbers) for _ in range(6)} for _ in range(300)]
        script = (
            "const canon = (v) => v === null || typeof v !== 'object' ? JSON.stringify(v)"
            " : Array.isArray(v) ? '[' + v.map(canon).join(',') + ']'"
            " : '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + canon(v[k])).join(',') + '}';"
            "process.stdout.write(JSON.stringify(JSON.parse(require('fs').readFileSync(0, 'utf8')).map(canon)))"
        )
        values = numbers + objects
        for value, expected in zip(values, node(script, values)):
            self.assertEqual(canonical_json(value), expected, repr(value))


# RFC 8032 section 7.1: (name, secret key, public key, message, signature).
RFC8032 = [
    ("TEST 1", "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("TEST 2", "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb", "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("TEST 3", "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7", "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
    ("TEST 1024", "f5e5767cf153319517630f226876b86c8160cc583bc013744c6bf255f5cc0ee5", "278117fc144c72340f67d0f2316e8386ceffbf2b2428c9c51fef7c597f1d426e",
     "08b8b2b733424243760fe426a4b54908632110a66c2f6591eabd3345e3e4eb98fa6e264bf09efe12ee50f8f54e9f77b1e355f6c50544e23fb1433ddf73be84d879de7c0046dc4996d9e7"
     "73f4bc9efe5738829adb26c81b37c93a1b270b20329d658675fc6ea534e0810a4432826bf58c941efb65d57a338bbd2e26640f89ffbc1a858efcb8550ee3a5e1998bd177e93a7363c344fe6b199ee5"
     "d02e82d522c4feba15452f80288a821a579116ec6dad2b3b310da903401aa62100ab5d1a36553e06203b33890cc9b832f79ef80560ccb9a39ce767967ed628c6ad573cb116dbefefd75499da96bd68"
     "a8a97b928a8bbc103b6621fcde2beca1231d206be6cd9ec7aff6f6c94fcd7204ed3455c68c83f4a41da4af2b74ef5c53f1d8ac70bdcb7ed185ce81bd84359d44254d95629e9855a94a7c1958d1f8"
     "ada5d0532ed8a5aa3fb2d17ba70eb6248e594e1a2297acbbb39d502f1a8c6eb6f1ce22b3de1a1f40cc24554119a831a9aad6079cad88425de6bde1a9187ebb6092cf67bf2b13fd65f27088d78b7e"
     "883c8759d2c4f5c65adb7553878ad575f9fad878e80a0c9ba63bcbcc2732e69485bbc9c90bfbd62481d9089beccf80cfe2df16a2cf65bd92dd597b0707e0917af48bbb75fed413d238f5555a7a"
     "569d80c3414a8d0859dc65a46128bab27af87a71314f318c782b23ebfe808b82b0ce26401d2e22f04d83d1255dc51addd3b75a2b1ae0784504df543af8969be3ea7082ff7fc9888c144da2af5842"
     "9ec96031dbcad3dad9af0dcbaaaf268cb8fcffead94f3c7ca495e056a9b47acdb751fb73e666c6c655ade8297297d07ad1ba5e43f1bca32301651339e22904cc8c42f58c30c04aafdb038dda0847"
     "dd988dcda6f3bfd15c4b4c4525004aa06eeff8ca61783aacec57fb3d1f92b0fe2fd1a85f6724517b65e614ad6808d6f6ee34dff7310fdc82aebfd904b01e1dc54b2927094b2db68d6f903b68401a"
     "debf5a7e08d78ff4ef5d63653a65040cf9bfd4aca7984a74d37145986780fc0b16ac451649de6188a7dbdf191f64b5fc5e2ab47b57f7f7276cd419c17a3ca8e1b939ae49e488acba6b965610b54"
     "80109c8b17b80e1b7b750dfc7598d5d5011fd2dcc5600a32ef5b52a1ecc820e308aa342721aac0943bf6686b64b2579376504ccc493d97e6aed3fb0f9cd71a43dd497f01f17c0e2cb3797aa2a2f"
     "256656168e6c496afc5fb93246f6b1116398a346f1a641f3b041e989f7914f90cc2c7fff357876e506b50d334ba77c225bc307ba537152f3f1610e4eafe595f6d9d90d11faa933a15ef13695468"
     "68a7f3a45a96768d40fd9d03412c091c6315cf4fde7cb68606937380db2eaaa707b4c4185c32eddcdd306705e4dc1ffc872eeee475a64dfac86aba41c0618983f8741c5ef68d3a101e8a3b8cac6"
     "0c905c15fc910840b94c00a0b9d0",
     "0aab4c900501b3e24d7cdf4663326a3a87df5e4843b2cbdb67cbf6e460fec350aa5371b1508f9f4528ecea23c436d94b5e8fcd4f681e30a6ac00a9704a188a03"),
    ("SHA(abc)", "833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42", "ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf",
     "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
     "dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704"),
]  # fmt: skip


class Ed25519Test(unittest.TestCase):
    def test_rfc8032_section_7_1_vectors_verify_and_the_test_signer_reproduces_them(self):
        self.assertEqual(len(h(RFC8032[3][3])), 1023)
        for name, secret, public, message, signature in RFC8032:
            with self.subTest(name):
                self.assertTrue(_ed25519.verify(h(public), h(message), h(signature)))
                self.assertEqual(fx.public_key(h(secret)), h(public))
                self.assertEqual(fx.sign(h(secret), h(message)), h(signature))

    def test_altered_messages_signatures_and_keys_are_refused(self):
        for name, _, public, message, signature in RFC8032:
            with self.subTest(name):
                pk, msg, sig = h(public), h(message), h(signature)
                self.assertFalse(_ed25519.verify(pk, msg + b"\x00", sig))
                for position in (0, 31, 32, 63):
                    self.assertFalse(_ed25519.verify(pk, msg, sig[:position] + bytes([sig[position] ^ 1]) + sig[position + 1 :]))
                self.assertFalse(_ed25519.verify(pk, msg, sig[:63]))
                other = h(RFC8032[(RFC8032.index((name, _, public, message, signature)) + 1) % len(RFC8032)][2])
                self.assertFalse(_ed25519.verify(other, msg, sig))

    def test_a_non_canonical_s_is_refused(self):
        # S + L verifies in the group equation, but S must be below L (RFC 8032 section 5.1.7).
        for name, _, public, message, signature in RFC8032:
            sig = h(signature)
            s = int.from_bytes(sig[32:], "little")
            with self.subTest(name):
                self.assertFalse(_ed25519.verify(h(public), h(message), sig[:32] + (s + _ed25519.L).to_bytes(32, "little")))

    def test_invalid_point_encodings_are_refused(self):
        p = _ed25519.P
        self.assertIsNone(_ed25519.decode_point(p.to_bytes(32, "little")))  # y = p: a second encoding of y = 0
        self.assertIsNone(_ed25519.decode_point((p + 1).to_bytes(32, "little")))
        self.assertIsNone(_ed25519.decode_point((1 | 1 << 255).to_bytes(32, "little")))  # y = 1 has x = 0: the sign bit must be 0
        self.assertIsNotNone(_ed25519.decode_point((1).to_bytes(32, "little")))
        no_x = next(y for y in range(2, 100) if _ed25519.decode_point(y.to_bytes(32, "little")) is None)
        self.assertIsNone(_ed25519.decode_point(no_x.to_bytes(32, "little")))
        self.assertIsNone(_ed25519.decode_point(b"\x01" * 31))
        _, _, public, message, signature = RFC8032[0]
        sig = h(signature)
        self.assertFalse(_ed25519.verify(h(public), h(message), no_x.to_bytes(32, "little") + sig[32:]))  # R no point
        with self.assertRaises(ValueError):
            _ed25519.verify(no_x.to_bytes(32, "little"), h(message), sig)
        with self.assertRaises(ValueError):
            _ed25519.verify(h(public)[:31], h(message), sig)

    @unittest.skipUnless(NODE, "node:crypto signs as the service does")
    def test_agrees_with_node_crypto(self):
        rng = random.Random(8032)
        cases = [{"seed": rng.getrandbits(256).to_bytes(32, "little").hex(), "message": rng.getrandbits(8 * n).to_bytes(n, "little").hex()} for n in range(0, 40, 3)]
        script = (
            "const c = require('node:crypto');"
            "const out = JSON.parse(require('fs').readFileSync(0, 'utf8')).map(({seed, message, signature}) => {"
            " const key = c.createPrivateKey({key: Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.from(seed, 'hex')]), format: 'der', type: 'pkcs8'});"
            " const pub = c.createPublicKey(key);"
            " return {public: pub.export({format: 'der', type: 'spki'}).subarray(12).toString('hex'),"
            "  signature: c.sign(null, Buffer.from(message, 'hex'), key).toString('hex'),"
            "  verified: c.verify(null, Buffer.from(message, 'hex'), pub, Buffer.from(signature, 'hex'))}; });"
            "process.stdout.write(JSON.stringify(out))"
        )
        for case in cases:
            case["signature"] = fx.sign(h(case["seed"]), h(case["message"])).hex()
        for case, answer in zip(cases, node(script, cases)):
            self.assertEqual(answer["public"], fx.public_key(h(case["seed"])).hex())
            self.assertEqual(answer["signature"], case["signature"])
            self.assertTrue(answer["verified"])
            self.assertTrue(_ed25519.verify(h(answer["public"]), h(case["message"]), h(answer["signature"])))


# The certificate-transparency test tree (transparency-dev/merkle's testonly and proof tests):
# its leaves, the roots of its first 1..8 leaves, and known proofs.
CT_LEAVES = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]
CT_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_LEAF_HASHES = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
    "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
    "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
    "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
    "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
    "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
    "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
]
# (leaf index, tree size, path)
CT_INCLUSION = [
    (0, 1, []),
    (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7", "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b", "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (1, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d", "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]  # fmt: skip
# (first, second, path)
CT_CONSISTENCY = [
    (1, 1, []),
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7", "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a", "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e", "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
    (6, 7, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a", "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
]  # fmt: skip
SOME_HASH = h("abacaba000000000000000000000000000000000000000000060061e00123456")


def flipped(path, i, bit=8):
    return path[:i] + [bytes([path[i][0] ^ bit]) + path[i][1:]] + path[i + 1 :]


def inclusion_forgeries(index, size, path, root, digest):
    """Altered inputs that must all be refused (after transparency-dev/merkle's corruptions)."""
    yield "wrong leaf", (leaf_hash(b"WrongLeaf"), index, size, path, root)
    yield "empty-tree root", (digest, index, size, path, audit.EMPTY_ROOT)
    yield "other root", (digest, index, size, path, SOME_HASH)
    yield "index = size", (digest, size, size, path, root)
    yield "trailing root", (digest, index, size, path + [root], root)
    yield "preceding root", (digest, index, size, [root] + path, root)
    if index ^ 1 < size:
        yield "sibling index", (digest, index ^ 1, size, path, root)
    for i in range(len(path)):
        yield "flipped path[%d]" % i, (digest, index, size, flipped(path, i), root)
    if path:
        yield "removed last hash", (digest, index, size, path[:-1], root)
        yield "inserted hash", (digest, index, size, path[:1] + [SOME_HASH] + path[1:], root)


def consistency_forgeries(first, second, path, first_root, second_root):
    yield "wrong first root", (first, second, SOME_HASH, second_root, path)
    yield "wrong second root", (first, second, first_root, SOME_HASH, path)
    yield "swapped roots", (first, second, second_root, first_root, path)
    yield "empty path", (first, second, first_root, second_root, [])
    yield "trailing first root", (first, second, first_root, second_root, path + [first_root])
    yield "trailing second root", (first, second, first_root, second_root, path + [second_root])
    yield "preceding first root", (first, second, first_root, second_root, [first_root] + path)
    yield "preceding second root", (first, second, first_root, second_root, [second_root] + path)
    yield "preceding path[0]", (first, second, first_root, second_root, path[:1] + path)
    yield "truncated path", (first, second, first_root, second_root, path[:-1])
    yield "sizes swapped", (second, first, second_root, first_root, path)
    for i in range(len(path)):
        yield "flipped path[%d]" % i, (first, second, first_root, second_root, flipped(path, i, 16))


class MerkleKnownAnswerTest(unittest.TestCase):
    def setUp(self):
        self.tree = Tree.of_leaves(h(leaf) for leaf in CT_LEAVES)

    def test_leaf_hashes_and_roots_of_sizes_1_to_8(self):
        self.assertEqual([leaf_hash(h(leaf)).hex() for leaf in CT_LEAVES], CT_LEAF_HASHES)
        self.assertEqual([self.tree.root(size).hex() for size in range(1, 9)], CT_ROOTS)
        self.assertEqual(audit.EMPTY_ROOT.hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        self.assertEqual(node_hash(h(CT_LEAF_HASHES[0]), h(CT_LEAF_HASHES[1])).hex(), CT_ROOTS[1])

    def test_known_inclusion_proofs_verify_and_their_corruptions_do_not(self):
        for index, size, path in CT_INCLUSION:
            with self.subTest(index=index, size=size):
                path = [h(p) for p in path]
                self.assertEqual(self.tree.inclusion_path(index, size), path)
                root, digest = h(CT_ROOTS[size - 1]), h(CT_LEAF_HASHES[index])
                verify_inclusion(digest, index, size, path, root)
                probes = list(inclusion_forgeries(index, size, path, root, digest))
                if size > 1:  # these change the path's shape on these vectors (not on every tree)
                    probes += [("size * 2", (digest, index, size * 2, path, root)), ("size / 2", (digest, index, size // 2, path, root))]
                for what, args in probes:
                    with self.subTest(what), self.assertRaises(AuditVerificationError):
                        verify_inclusion(*args)

    def test_known_consistency_proofs_verify_and_their_corruptions_do_not(self):
        for first, second, path in CT_CONSISTENCY:
            with self.subTest(first=first, second=second):
                path = [h(p) for p in path]
                self.assertEqual(self.tree.consistency_path(first, second), path)
                first_root, second_root = h(CT_ROOTS[first - 1]), h(CT_ROOTS[second - 1])
                verify_consistency(first, second, first_root, second_root, path)
                if not path:
                    continue
                probes = list(consistency_forgeries(first, second, path, first_root, second_root))
                probes += [("first - 1", (first - 1, second, first_root, second_root, path)), ("first + 1", (first + 1, second, first_root, second_root, path)),
                           ("first ^ 2", (first ^ 2, second, first_root, second_root, path)), ("second * 2", (first, second * 2, first_root, second_root, path)),
                           ("second / 2", (first, second // 2, first_root, second_root, path))]  # fmt: skip
                for what, args in probes:
                    with self.subTest(what), self.assertRaises(AuditVerificationError):
                        verify_consistency(*args)


class MerklePropertyTest(unittest.TestCase):
    """Every proof of every tree of 1 to 70 leaves verifies; every mutation of one is refused."""

    @classmethod
    def setUpClass(cls):
        cls.tree = Tree.of_leaves(canonical_json(leaf).encode() for leaf in fx.events(70))

    def test_every_inclusion_proof_verifies_and_no_mutation_does(self):
        for size in range(1, 71):
            root = self.tree.root(size)
            for index in range(size):
                path, digest = self.tree.inclusion_path(index, size), self.tree.hashes[index]
                verify_inclusion(digest, index, size, path, root)
                for what, args in inclusion_forgeries(index, size, path, root, digest):
                    with self.assertRaises(AuditVerificationError, msg="%s: leaf %d of %d" % (what, index, size)):
                        verify_inclusion(*args)

    def test_every_consistency_proof_verifies_and_no_mutation_does(self):
        for second in range(1, 71):
            for first in range(1, second + 1):
                path = self.tree.consistency_path(first, second)
                first_root, second_root = self.tree.root(first), self.tree.root(second)
                verify_consistency(first, second, first_root, second_root, path)
                if first == second:
                    self.assertEqual(path, [])
                    continue
                for what, args in consistency_forgeries(first, second, path, first_root, second_root):
                    with self.assertRaises(AuditVerificationError, msg="%s: %d to %d" % (what, first, second)):
                        verify_consistency(*args)

    def test_every_multi_leaf_proof_gives_the_root_and_hiding_a_leaf_is_refused(self):
        rng = random.Random(6962)
        for size in range(1, 71):
            root = self.tree.root(size)
            for _ in range(6):
                chosen = sorted(rng.sample(range(size), rng.randint(0, size)))
                leaves = {i: self.tree.hashes[i] for i in chosen}
                proof = self.tree.multi_leaf_proof(size, chosen)
                self.assertEqual(audit.root_from_multi_leaf_proof(size, leaves, proof), root)
                if not chosen:
                    continue
                dropped = rng.choice(chosen)
                fewer = {i: d for i, d in leaves.items() if i != dropped}
                with self.assertRaisesRegex(AuditVerificationError, "leaf %d is neither in the export nor covered by the proof" % dropped):
                    audit.root_from_multi_leaf_proof(size, fewer, proof)
                hiding = [(dropped, dropped + 1, self.tree.hashes[dropped])] + proof
                with self.assertRaisesRegex(AuditVerificationError, "holds exported leaf %d: it would hide that leaf" % dropped):
                    audit.root_from_multi_leaf_proof(size, leaves, hiding)

    def test_multi_leaf_proof_refusals(self):
        tree, size = self.tree, 13
        leaves = {2: tree.hashes[2], 9: tree.hashes[9]}
        proof = tree.multi_leaf_proof(size, leaves)
        self.assertEqual(audit.root_from_multi_leaf_proof(size, leaves, proof), tree.root(size))
        cases = [
            ("leaf 13 is at or beyond the checkpoint's tree_size 13", {**leaves, 13: SOME_HASH}, proof),
            ("proof range \\[0, 2\\) is listed twice", leaves, proof + [proof[0]]),
            ("proof range \\[0, 1\\) is not a range the tree's recursion visits", leaves, proof + [(0, 1, tree.hashes[0])]),
            ("proof range \\[4, 7\\) is not a range the tree's recursion visits", leaves, proof + [(4, 7, SOME_HASH)]),
            ("proof range \\[12, 14\\) is not a range of a tree of 13 leaves", leaves, proof + [(12, 14, SOME_HASH)]),
            ("proof range \\[5, 5\\) is not a range", leaves, proof + [(5, 5, SOME_HASH)]),
            ("leaf 3 is neither in the export nor covered by the proof", leaves, [p for p in proof if p[:2] != (3, 4)]),
        ]
        for reason, given, ranges in cases:
            with self.subTest(reason), self.assertRaisesRegex(AuditVerificationError, reason):
                audit.root_from_multi_leaf_proof(size, given, ranges)
        self.assertEqual(audit.root_from_multi_leaf_proof(0, {}, []), audit.EMPTY_ROOT)


class ForgedConsistencyProofTest(unittest.TestCase):
    """GHSA-672p-m5jq-mrh8: immudb's verifier accepted a forged consistency proof. Each shape of
    forgery is refused, with its reason."""

    def setUp(self):
        self.tree = Tree.of_leaves(canonical_json(leaf).encode() for leaf in fx.events(20))
        self.root = self.tree.root

    def refused(self, reason, *args):
        with self.assertRaisesRegex(AuditVerificationError, reason):
            verify_consistency(*args)

    def test_equal_sizes_with_different_roots(self):
        self.refused("the tree of 10 leaves has two roots", 10, 10, self.root(10), self.root(11), [])
        self.refused("a consistency proof between two trees of 10 leaves is empty", 10, 10, self.root(10), self.root(10), [self.root(10)])

    def test_a_path_too_long_or_too_short(self):
        path = self.tree.consistency_path(6, 20)
        self.refused("longer than the trees need", 6, 20, self.root(6), self.root(20), path + [SOME_HASH])
        self.refused("shorter than the trees need", 6, 20, self.root(6), self.root(20), path[:-1])
        self.refused("is empty", 6, 20, self.root(6), self.root(20), [])

    def test_first_greater_than_second_and_first_zero(self):
        self.refused("tree shrank from 20 to 6 leaves: the newest events were truncated", 20, 6, self.root(20), self.root(6), self.tree.consistency_path(6, 20))
        self.refused("first is 0: an empty tree is consistent with every tree", 0, 20, audit.EMPTY_ROOT, self.root(20), [self.root(20)])
        self.refused("first is 0", 0, 0, audit.EMPTY_ROOT, audit.EMPTY_ROOT, [])

    def test_a_rewritten_history_extended_by_a_valid_looking_path(self):
        # A log that replaced leaf 3 and grew: its proof from 8 to 20 is genuine for its own tree.
        hashes = list(self.tree.hashes)
        hashes[3] = leaf_hash(b"rewritten")
        forged = Tree(hashes)
        self.refused("not a prefix|does not extend", 8, 20, self.root(8), forged.root(20), forged.consistency_path(8, 20))

    def test_sizes_and_hashes_that_are_not_what_they_claim(self):
        self.refused("first must be a whole number", True, 2, self.root(1), self.root(2), self.tree.consistency_path(1, 2))
        self.refused("first must be a whole number", -1, 2, self.root(1), self.root(2), [])
        self.refused("must be a 32-byte", 1, 2, self.root(1), self.root(2), [b"short"])
        self.refused("must be a 32-byte", 1, 2, self.root(1)[:31], self.root(2), self.tree.consistency_path(1, 2))


OLD = Signer("2026-h1", valid_from="2026-01-01T00:00:00.000Z", valid_until="2026-06-01T00:00:00.000Z")
NEW = Signer("2026-h2", valid_from="2026-06-01T00:00:00.000Z")
STRANGER = Signer("not-listed")
KEYS = keys_document(OLD, NEW)


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.tree = Tree.of_leaves(canonical_json(leaf).encode() for leaf in fx.events(40))

    def refused(self, reason, checkpoint, keys=KEYS):
        with self.assertRaisesRegex(AuditVerificationError, reason):
            audit.verify_checkpoint(checkpoint, keys)

    def test_a_signed_checkpoint_verifies_with_its_key_in_its_window(self):
        checkpoint = OLD.checkpoint(self.tree, 40, issued_at="2026-05-31T23:59:59.999Z")
        self.assertEqual(audit.verify_checkpoint(checkpoint, KEYS), OLD.entry)
        self.assertEqual(audit.verify_checkpoint(checkpoint, KEYS["data"]), OLD.entry)
        self.assertTrue(audit.checkpoint_message(checkpoint).startswith(b'jobsvc-audit-checkpoint-v1\n{"issued_at":"2026-05-31T23:59:59.999Z","key_id":"'))
        self.assertEqual(audit.verify_checkpoint(NEW.checkpoint(self.tree, 40, issued_at="2026-06-01T00:00:00.000Z"), KEYS), NEW.entry)
        self.assertEqual(audit.verify_checkpoint(NEW.checkpoint(Tree([]), 0), KEYS), NEW.entry)

    def test_a_checkpoint_signed_by_an_unknown_key(self):
        checkpoint = STRANGER.checkpoint(self.tree, 40)
        self.refused("checkpoint signed by unknown key %s: the keys document lists %s, %s" % ((STRANGER.key_id,) + tuple(sorted([OLD.key_id, NEW.key_id]))), checkpoint)
        # Claiming a listed key's id does not make the stranger's signature that key's.
        self.refused("does not verify with key %s" % NEW.key_id, dict(checkpoint, key_id=NEW.key_id))

    def test_a_valid_key_outside_its_window(self):
        self.refused("outside the window of key %s \\(valid from 2026-01-01T00:00:00.000Z until 2026-06-01T00:00:00.000Z\\)" % OLD.key_id,
                     OLD.checkpoint(self.tree, 40, issued_at="2026-06-01T00:00:00.000Z"))  # fmt: skip
        self.refused("outside the window of key %s" % OLD.key_id, OLD.checkpoint(self.tree, 40, issued_at="2026-06-01T02:00:00.001+02:00"))
        self.refused("outside the window of key %s \\(valid from 2026-06-01T00:00:00.000Z on" % NEW.key_id, NEW.checkpoint(self.tree, 40, issued_at="2026-05-31T23:59:59.999Z"))

    def test_any_altered_field_breaks_the_signature(self):
        checkpoint = NEW.checkpoint(self.tree, 40, issued_at="2026-07-01T00:00:00.000Z")
        for name, value in [("tree_size", 39), ("root_hash", self.tree.root(39).hex()), ("issued_at", "2026-07-01T00:00:00.001Z"), ("project_id", "prj_other")]:
            with self.subTest(name):
                self.refused("signature does not verify with key %s" % NEW.key_id, dict(checkpoint, **{name: value}))

    def test_malformed_checkpoints_and_keys_documents(self):
        checkpoint = NEW.checkpoint(self.tree, 40, issued_at="2026-07-01T00:00:00.000Z")
        self.refused("tree_size is not a whole number", dict(checkpoint, tree_size="40"))
        self.refused("tree_size is not a whole number", dict(checkpoint, tree_size=True))
        self.refused("root_hash is not a hash", dict(checkpoint, root_hash=checkpoint["root_hash"].upper()))
        self.refused("issued_at is not an RFC 3339 time", dict(checkpoint, issued_at="yesterday"))
        self.refused("signature is not standard base64 of 64 bytes", dict(checkpoint, signature=checkpoint["signature"].rstrip("=")))
        self.refused("not an object|not a JSON object", [checkpoint])
        self.refused("has no data list", checkpoint, keys={"keys": []})
        self.refused("algorithm \"Ed448\"", checkpoint, keys={"data": [dict(NEW.entry, algorithm="Ed448")]})
        self.refused("is not the key of that id", checkpoint, keys={"data": [dict(NEW.entry, public_key=OLD.entry["public_key"])]})
        self.refused("signs an empty tree with the root", resign(NEW, dict(checkpoint, tree_size=0)))


def write_export(kind, count=60, size=None, indices=None, signer=NEW, issued_at="2026-07-01T00:00:00.000Z", unattested=0):
    leaves = fx.events(count)
    tree = Tree.of_leaves(canonical_json(leaf).encode() for leaf in leaves)
    checkpoint = signer.checkpoint(tree, size or count, issued_at=issued_at)
    chosen = indices if indices is not None else [i for i in range(0, size or count, 3)][3:12]
    return fx.export_lines(kind, leaves, chosen, checkpoint, tree, signer, unattested=unattested), tree, leaves


def with_manifest(export, /, signer=NEW, **changes):
    """The export's lines with the manifest's members changed (lines among them) and the manifest
    signed again by signer (as the service, or whoever holds its key, would), or with its old
    signature kept (signer None: as whoever holds the file would)."""
    manifest = json.loads(export[-1])["manifest"]
    manifest.update(changes)
    if signer is not None:
        manifest = fx.sign_manifest(signer, manifest)
    return export[:-1] + [json.dumps({"manifest": manifest})]


class ExportTest(unittest.TestCase):
    def refused(self, reason, lines, keys=KEYS, **options):
        with self.assertRaisesRegex(AuditVerificationError, reason):
            audit.verify_export(lines, keys, **options)

    def test_attested_exports_of_both_kinds_verify(self):
        lines, _, _ = write_export("audit_log", unattested=2)
        report = audit.verify_export(lines, KEYS)
        self.assertEqual((report.kind, report.project_id, report.rows, report.leaves, report.unattested_rows), ("audit_log", PROJECT, 11, 9, 2))
        self.assertEqual(audit.verify_export("\n".join(lines) + "\n", KEYS), report)
        self.assertEqual(audit.verify_export(("\n".join(lines) + "\n\n").encode(), KEYS), report)
        lines, _, _ = write_export("jobs")
        report = audit.verify_export(lines, KEYS)
        self.assertEqual((report.kind, report.rows, report.leaves, report.unattested_rows), ("jobs", 9, 18, 0))
        # Every leaf of the tree, no proof; no leaf at all, the root alone.
        self.assertEqual(audit.verify_export(write_export("audit_log", count=7, indices=range(7))[0], KEYS).leaves, 7)
        self.assertEqual(audit.verify_export(write_export("audit_log", count=7, indices=[])[0], KEYS).leaves, 0)

    def test_an_altered_event_is_refused(self):
        lines, _, _ = write_export("audit_log")
        row = json.loads(lines[4])
        row["leaf"]["data"]["progress"] = 0.5
        self.refused("give the root [0-9a-f]{64}, the checkpoint signs [0-9a-f]{64}: a leaf or a proof hash was altered", lines[:4] + [json.dumps(row)] + lines[5:])

    def test_a_deleted_event_in_the_middle_is_refused(self):
        lines, _, _ = write_export("audit_log")
        deleted = json.loads(lines[4])["leaf_index"]
        self.refused("the manifest lists leaf %d, but no line holds it: a line was deleted" % deleted, lines[:4] + lines[5:])
        # And with the manifest's list edited to match:
        leaves = [i for i in json.loads(lines[-1])["manifest"]["leaves"] if i != deleted]
        self.refused("leaf %d is neither in the export nor covered by the proof" % deleted, with_manifest(lines[:4] + lines[5:-1] + lines[-1:], leaves=leaves, lines=8))

    def test_a_deleted_line_is_refused_however_the_manifest_is_rewritten_without_its_key(self):
        lines, tree, _ = write_export("audit_log")
        manifest = json.loads(lines[-1])["manifest"]
        deleted = json.loads(lines[4])["leaf_index"]
        kept = [i for i in manifest["leaves"] if i != deleted]
        cut = lines[:4] + lines[5:]
        # What the proof alone let through (docs/audit.md): the line gone, its index dropped from
        # leaves, its leaf's hash added to the proof as a range of one, and the count fixed.
        rewritten = {"lines": 8, "leaves": kept, "proof": manifest["proof"] + [{"start": deleted, "end": deleted + 1, "hash": tree.hashes[deleted].hex()}]}
        self.refused("^the manifest's signature does not verify with key %s: the manifest was altered, or that key did not sign it$" % NEW.key_id,
                     with_manifest(cut, signer=None, **rewritten))  # fmt: skip
        # Only the signing key makes it pass: signed again, the same rewrite verifies.
        self.assertEqual(audit.verify_export(with_manifest(cut, **rewritten), KEYS).rows, 8)
        # Signed again with its old count, or the proof rewritten but the count not: the count tells.
        self.refused("^the manifest counts 9 lines before it, the export has 8: lines were deleted or added$", with_manifest(cut, **dict(rewritten, lines=9)))
        self.refused("^the manifest counts 8 lines before it, the export has 9: lines were deleted or added$", with_manifest(lines, lines=8))

    def test_a_row_without_a_leaf_deleted_or_added_is_refused_by_the_count(self):
        lines, _, _ = write_export("audit_log", unattested=2)
        account = next(i for i, line in enumerate(lines) if json.loads(line).get("leaf") is None)
        self.refused("^the manifest counts 11 lines before it, the export has 10", lines[:account] + lines[account + 1 :])
        self.refused("^the manifest counts 11 lines before it, the export has 12", lines[: account + 1] + lines[account:])
        self.refused("signature does not verify", with_manifest(lines[:account] + lines[account + 1 :], signer=None, lines=10))

    def test_the_manifest_must_be_signed_by_a_listed_key_inside_its_window(self):
        lines, tree, _ = write_export("audit_log")
        manifest = json.loads(lines[-1])["manifest"]
        self.refused("^manifest signed by unknown key %s: the keys document lists %s$" % (STRANGER.key_id, ", ".join(sorted([OLD.key_id, NEW.key_id]))),
                     with_manifest(lines, signer=STRANGER))  # fmt: skip
        # Claiming a listed key's id does not make the stranger's signature that key's.
        forged = dict(fx.sign_manifest(STRANGER, manifest), key_id=NEW.key_id)
        self.refused("^the manifest's signature does not verify with key %s" % NEW.key_id, lines[:-1] + [json.dumps({"manifest": forged})])
        self.refused("^manifest signed at 2026-07-01T00:00:00.000Z, outside the window of key %s \\(valid from 2026-01-01T00:00:00.000Z until 2026-06-01T00:00:00.000Z\\)$" % OLD.key_id,
                     with_manifest(lines, signer=OLD))  # fmt: skip
        self.refused("^manifest signed at 2026-05-31T23:59:59.999Z, outside the window of key %s" % NEW.key_id, with_manifest(lines, signed_at="2026-05-31T23:59:59.999Z"))
        # Any member changed after signing: the window, the time it says, its checkpoint.
        for name, value in [("from", "2026-04-01T00:00:00.000Z"), ("signed_at", "2026-07-01T00:00:00.001Z"), ("kind", "jobs"),
                            ("checkpoint", NEW.checkpoint(tree, 60, issued_at="2026-07-01T00:00:00.001Z"))]:  # fmt: skip
            with self.subTest(name):
                self.refused("^the manifest's signature does not verify with key %s" % NEW.key_id, with_manifest(lines, signer=None, **{name: value}))
        unsigned = {name: value for name, value in manifest.items() if name != "signature"}
        self.refused("^the manifest's signature is not standard base64 of 64 bytes$", lines[:-1] + [json.dumps({"manifest": unsigned})])
        self.refused("^the manifest's key_id is not 16 lower-case hex characters: null$", with_manifest(lines, signer=None, key_id=None))
        for signed_at in ("2026-07-01T00:00:00Z", "2026-07-01T02:00:00.000+02:00", "2026-07-01T00:00:00.000000Z", None):
            with self.subTest(signed_at):
                self.refused("^the manifest's signed_at is not an RFC 3339 UTC time with milliseconds", with_manifest(lines, signed_at=signed_at))
        self.refused("^the manifest's signed_at is not an RFC 3339 time", with_manifest(lines, signed_at="2026-13-01T00:00:00.000Z"))
        self.refused("^the manifest's lines is not a whole number", with_manifest(lines, lines="9"))
        infinite = with_manifest(lines, signer=None, until="INFINITE")
        self.refused("^the manifest has no JCS form", infinite[:-1] + [infinite[-1].replace('"INFINITE"', "1e999")])  # parses as Infinity

    def test_a_key_rotated_between_the_checkpoint_and_the_manifest_is_accepted(self):
        # The checkpoint signed by the old key a second before the rotation, the manifest by the new one at it.
        lines, _, _ = write_export("jobs", signer=OLD, issued_at="2026-05-31T23:59:59.000Z")
        lines = with_manifest(lines, signer=NEW, signed_at="2026-06-01T00:00:00.000Z")
        report = audit.verify_export(lines, KEYS)
        self.assertEqual((report.checkpoint["key_id"], report.manifest_key, report.signed_at), (OLD.key_id, NEW.entry, "2026-06-01T00:00:00.000Z"))
        self.refused("^manifest signed at 2026-06-01T00:00:00.000Z, outside the window of key %s" % OLD.key_id, with_manifest(lines, signer=OLD))

    def test_a_line_whose_leaf_is_not_a_leaf_object_of_the_project_is_refused(self):
        lines, tree, leaves = write_export("audit_log")
        row = json.loads(lines[1])
        with_leaf = lambda leaf: lines[:1] + [json.dumps(dict(row, leaf=leaf))] + lines[2:]  # noqa: E731
        # The members a feed event adds beside the leaf object are left out before hashing.
        self.assertEqual(audit.verify_export(with_leaf(dict(row["leaf"], cursor="c_9", state={"state": "running"}, leaf_index=row["leaf_index"])), KEYS).leaves, 9)
        self.refused("^line 2's leaf has note, which no leaf object has$", with_leaf(dict(row["leaf"], note="x")))
        self.refused("^line 2's leaf lacks data, occurred_at: it is not an event of the feed$", with_leaf({k: v for k, v in row["leaf"].items() if k not in ("data", "occurred_at")}))
        jobs, _, _ = write_export("jobs")
        job = json.loads(jobs[0])
        latest = dict(job["attestation"]["latest"], leaf=dict(job["attestation"]["latest"]["leaf"], digest="x"))
        self.refused("^line 1's attestation.latest's leaf has digest, which no leaf object has$",
                     [json.dumps(dict(job, attestation=dict(job["attestation"], latest=latest)))] + jobs[1:])  # fmt: skip
        # A leaf of another project at an index of this one: refused before the root is computed.
        self.refused("^line 2's leaf is of project prj_other, the manifest of project %s$" % PROJECT, with_leaf(dict(row["leaf"], project_id="prj_other")))
        self.refused('^line 2\'s leaf is of project \\[1\\], the manifest of project', with_leaf(dict(row["leaf"], project_id=[1])))

    @unittest.skipUnless(NODE, "node:crypto signs as the service does")
    def test_a_manifest_signed_by_node_crypto_verifies(self):
        # The service's signer: JSON.stringify with sorted keys (JCS for these values) and node:crypto.
        lines, _, _ = write_export("audit_log", unattested=1)
        manifest = {name: value for name, value in json.loads(lines[-1])["manifest"].items() if name != "signature"}
        script = (
            "const c = require('node:crypto');"
            "const canon = (v) => v === null || typeof v !== 'object' ? JSON.stringify(v)"
            " : Array.isArray(v) ? '[' + v.map(canon).join(',') + ']'"
            " : '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + canon(v[k])).join(',') + '}';"
            "const {seed, manifest} = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
            "const key = c.createPrivateKey({key: Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.from(seed, 'hex')]), format: 'der', type: 'pkcs8'});"
            "const bytes = Buffer.from('jobsvc-audit-export-v1\\n' + canon(manifest), 'utf8');"
            "process.stdout.write(JSON.stringify({bytes: bytes.toString('hex'), signature: c.sign(null, bytes, key).toString('base64')}))"
        )
        answer = node(script, {"seed": NEW.seed.hex(), "manifest": manifest})
        self.assertEqual(h(answer["bytes"]), audit.manifest_message(manifest))
        signed = lines[:-1] + [json.dumps({"manifest": dict(manifest, signature=answer["signature"])})]
        self.assertEqual(audit.verify_export(signed, KEYS).manifest_key, NEW.entry)

    def test_the_newest_events_truncated_against_a_stored_checkpoint(self):
        # The checkpoint kept earlier covered 120 leaves; the log now signs 100 of them.
        leaves = fx.events(120)
        tree = Tree.of_leaves(canonical_json(leaf).encode() for leaf in leaves)
        stored = NEW.checkpoint(tree, 120, issued_at="2026-07-01T00:00:00.000Z")
        later = NEW.checkpoint(tree, 100, issued_at="2026-07-02T00:00:00.000Z")
        lines = fx.export_lines("audit_log", leaves, range(90, 100), later, tree, NEW)
        self.assertEqual(audit.verify_export(lines, KEYS).leaves, 10)  # fine on its own...
        self.refused("tree shrank from 120 to 100 leaves: the newest events were truncated", lines, stored_checkpoint=stored)
        self.refused("tree shrank from 120 to 100 leaves", lines, stored_checkpoint=stored, consistency_proof={"first": 100, "second": 120, "consistency_path": [p.hex() for p in tree.consistency_path(100, 120)]})

    def test_a_stored_checkpoint_extended_by_the_export_and_a_key_rotated_mid_range_are_accepted(self):
        leaves = fx.events(90)
        tree = Tree.of_leaves(canonical_json(leaf).encode() for leaf in leaves)
        stored = OLD.checkpoint(tree, 50, issued_at="2026-05-20T10:00:00.000Z")
        current = NEW.checkpoint(tree, 90, issued_at="2026-06-10T10:00:00.000Z")
        lines = fx.export_lines("jobs", leaves, [30, 45, 60, 87], current, tree, NEW)
        proof = {"first": 50, "second": 90, "consistency_path": [p.hex() for p in tree.consistency_path(50, 90)]}
        report = audit.verify_export(lines, KEYS, stored_checkpoint=stored, consistency_proof=proof)
        self.assertEqual(report.stored_checkpoint, stored)
        self.assertEqual(audit.verify_checkpoint_consistency(stored, current, proof, KEYS), (stored, current))
        self.assertEqual(audit.verify_checkpoint_consistency(current, stored, proof, KEYS), (stored, current))  # the times decide the order
        self.refused("a consistency proof from 50 to 90 leaves is needed", lines, stored_checkpoint=stored)
        self.refused("the consistency proof is from 49 to 90 leaves, the checkpoints have 50 and 90", lines, stored_checkpoint=stored,
                     consistency_proof={"first": 49, "second": 90, "consistency_path": [p.hex() for p in tree.consistency_path(49, 90)]})  # fmt: skip
        forked = Tree([leaf_hash(b"other")] + tree.hashes[1:])
        self.refused("does not extend the older", lines, stored_checkpoint=OLD.checkpoint(forked, 50, issued_at="2026-05-20T10:00:00.000Z"), consistency_proof=proof)
        self.refused("the tree of 90 leaves has two roots", lines, stored_checkpoint=NEW.checkpoint(forked, 90, issued_at="2026-06-09T00:00:00.000Z"))
        self.refused("checkpoints are of two projects", lines, stored_checkpoint=OLD.checkpoint(tree, 50, "2026-05-20T10:00:00.000Z", project_id="prj_other"), consistency_proof=proof)
        with self.assertRaises(ValueError):
            audit.verify_export(lines, KEYS, consistency_proof=proof)

    def test_a_forged_manifest_or_checkpoint_is_refused(self):
        lines, tree, _ = write_export("audit_log")
        manifest = json.loads(lines[-1])["manifest"]
        self.refused("checkpoint signed by unknown key %s" % STRANGER.key_id, with_manifest(lines, checkpoint=STRANGER.checkpoint(tree, 60)))
        self.refused("outside the window of key %s" % OLD.key_id, with_manifest(lines, checkpoint=OLD.checkpoint(tree, 60, issued_at="2026-07-01T00:00:00.000Z")))
        self.refused("signature does not verify", with_manifest(lines, checkpoint=dict(manifest["checkpoint"], root_hash=tree.root(59).hex())))
        hidden = manifest["leaves"][2]
        self.refused("holds exported leaf %d: it would hide that leaf" % hidden, with_manifest(lines, proof=manifest["proof"] + [{"start": hidden, "end": hidden + 1, "hash": tree.hashes[hidden].hex()}]))
        self.refused("is not a range the tree's recursion visits", with_manifest(lines, proof=manifest["proof"] + [{"start": 0, "end": 1, "hash": tree.hashes[0].hex()}]))
        beyond = lines[:-1] + [json.dumps({"leaf_index": 60, "leaf": fx.events(61)[60]})] + lines[-1:]
        self.refused("leaf 60 is at or beyond the checkpoint's tree_size 60", with_manifest(beyond, leaves=manifest["leaves"] + [60], lines=10))
        self.refused("is of project prj_other", with_manifest(lines, project_id="prj_other"))
        self.refused("version is 2", with_manifest(lines, version=2))
        self.refused("line 1 is a row of a audit_log export, the manifest says jobs", with_manifest(lines, kind="jobs"))
        self.refused("not ascending without repeats", with_manifest(lines, leaves=sorted(manifest["leaves"], reverse=True)))

    def test_lines_that_do_not_add_up_are_refused(self):
        lines, _, leaves = write_export("audit_log")
        row = json.loads(lines[2])
        twin = dict(row, leaf=dict(row["leaf"], type="job_cancelled"))
        self.refused("lines 3 and 4 name leaf %d with different objects" % row["leaf_index"], lines[:3] + [json.dumps(twin)] + lines[3:])
        self.assertEqual(audit.verify_export(with_manifest(lines[:3] + lines[2:], lines=10), KEYS).rows, 10)  # the same leaf twice is one leaf
        self.refused("line 10 names leaf 0, which the manifest's leaves do not list", lines[:-1] + [json.dumps({"leaf_index": 0, "leaf": leaves[0]})] + lines[-1:])
        self.refused("line 11 comes after the manifest \\(line 10\\)", lines + lines[:1])
        self.refused("no manifest line at its end: it was cut short", lines[:-1])
        self.refused("line 2 has no leaf_index and leaf", lines[:1] + ['{"id": "act_x"}'] + lines[1:])
        self.refused("line 2 is not JSON", lines[:1] + ['{"leaf_index": 3'] + lines[1:])
        self.refused("line 2 holds NaN", lines[:1] + ['{"leaf_index": NaN}'] + lines[1:])
        self.refused('line 2 has the field "leaf" twice', lines[:1] + [lines[1][:-1] + ', "leaf": null}'] + lines[1:])
        self.refused("line 2 is not UTF-8", [lines[0].encode(), b"\xff\n"] + [line.encode() for line in lines[1:]])

    def test_a_jobs_row_is_tied_to_its_job(self):
        lines, _, leaves = write_export("jobs")
        row = json.loads(lines[1])
        other = next(i for i, leaf in enumerate(leaves) if leaf["aggregate_id"] != row["id"] and leaf["type"] == "job_created")
        self.refused("line 2's attestation.created is an event of job_%04d, not of the row's job %s" % (other // 3, row["id"]),
                     lines[:1] + [json.dumps(dict(row, attestation=dict(row["attestation"], created={"leaf_index": other, "leaf": leaves[other]})))] + lines[2:])  # fmt: skip
        latest = row["attestation"]["latest"]
        self.refused('line 2\'s attestation.created is a "job_succeeded" event, not the job\'s job_created',
                     lines[:1] + [json.dumps(dict(row, attestation={"created": latest, "latest": latest}))] + lines[2:])  # fmt: skip
        self.refused("line 2's attestation is not a JSON object", lines[:1] + [json.dumps(dict(row, attestation=None))] + lines[2:])


class LeafInclusionTest(unittest.TestCase):
    def test_a_leaf_object_a_feed_event_or_an_export_line_is_proven_in_a_checkpoint(self):
        leaves = fx.events(30)
        tree = Tree.of_leaves(canonical_json(leaf).encode() for leaf in leaves)
        checkpoint = NEW.checkpoint(tree, 30)
        proof = {"leaf_index": 17, "tree_size": 30, "inclusion_path": [p.hex() for p in tree.inclusion_path(17, 30)]}
        event = dict(leaves[17], cursor="c_17", state={"state": "running"}, leaf_index=17)
        for given in (leaves[17], event, {"id": "act_1", "leaf_index": 17, "leaf": leaves[17]}):
            self.assertEqual(audit.verify_leaf_inclusion(given, proof, checkpoint, KEYS), 17)
        for reason, given, proof_given in [
            ("leaf 17 and its inclusion path give the root", dict(leaves[17], type="job_cancelled"), proof),
            ("the event is leaf 16, the proof is for leaf 17", dict(event, leaf_index=16), proof),
            ("the proof is for a tree of 31 leaves, the checkpoint signs one of 30", leaves[17], dict(proof, tree_size=31)),
            ("the event is of project prj_other", dict(leaves[17], project_id="prj_other"), proof),
            ("inclusion_path\\[0\\] is not a hash", leaves[17], dict(proof, inclusion_path=["00"] + proof["inclusion_path"][1:])),
        ]:
            with self.subTest(reason), self.assertRaisesRegex(AuditVerificationError, reason):
                audit.verify_leaf_inclusion(given, proof_given, checkpoint, KEYS)


class PublicApiTest(unittest.TestCase):
    def test_every_public_function_is_annotated(self):
        for name in audit.__all__:
            value = getattr(audit, name)
            if inspect.isfunction(value):
                with self.subTest(name):
                    signature = inspect.signature(value)
                    self.assertEqual([p.name for p in signature.parameters.values() if p.annotation is inspect.Parameter.empty], [])
                    self.assertIsNot(signature.return_annotation, inspect.Signature.empty)
                    typing.get_type_hints(value)


class CommandLineTest(unittest.TestCase):
    """python -m jobsvc.audit as a user runs it, on files."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="jobsvc-audit-")
        self.addCleanup(shutil.rmtree, self.dir)
        leaves = fx.events(80)
        self.tree = Tree.of_leaves(canonical_json(leaf).encode() for leaf in leaves)
        self.old = OLD.checkpoint(self.tree, 50, issued_at="2026-05-20T10:00:00.000Z")
        self.new = NEW.checkpoint(self.tree, 80, issued_at="2026-06-10T10:00:00.000Z")
        self.write("keys.json", KEYS)
        self.write("old.json", self.old)
        self.write("new.json", self.new)
        self.write("leaf.json", leaves[33])
        self.write("inclusion.json", {"leaf_index": 33, "tree_size": 80, "inclusion_path": [p.hex() for p in self.tree.inclusion_path(33, 80)]})
        self.write("consistency.json", {"first": 50, "second": 80, "consistency_path": [p.hex() for p in self.tree.consistency_path(50, 80)]})
        with open(self.path("export.ndjson"), "w", encoding="utf-8") as file:
            file.write("\n".join(fx.export_lines("audit_log", leaves, [3, 33, 79], self.new, self.tree, NEW, unattested=1)) + "\n")

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, value):
        with open(self.path(name), "w", encoding="utf-8") as file:
            json.dump(value, file)

    def run_cli(self, *args, stdin=None):
        env = dict(os.environ, PYTHONPATH=SDK_DIR, PYTHONDONTWRITEBYTECODE="1")
        done = subprocess.run([sys.executable, "-m", "jobsvc.audit", *args], cwd=self.dir, env=env, input=stdin, capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout, done.stderr

    def assertVerdict(self, args, code, pattern, stdin=None):
        returncode, out, err = self.run_cli(*args, stdin=stdin)
        self.assertEqual(returncode, code, out + err)
        self.assertRegex(out if code < 2 else err, pattern)
        if code < 2:
            self.assertEqual(out.count("\n"), 1, "one line: " + out)

    def test_each_command_verifies(self):
        self.assertVerdict(["checkpoint", "new.json", "--keys", "keys.json"], 0,
                           "^OK: checkpoint of %s at tree_size 80 \\(root %s\\) issued at 2026-06-10T10:00:00.000Z, signed by key %s \\(valid from 2026-06-01T00:00:00.000Z, current\\)\n$"
                           % (PROJECT, self.new["root_hash"], NEW.key_id))  # fmt: skip
        self.assertVerdict(["inclusion", "leaf.json", "inclusion.json", "new.json", "--keys", "keys.json"], 0, "^OK: leaf 33 is in the tree of 80 leaves of %s" % PROJECT)
        self.assertVerdict(["consistency", "old.json", "new.json", "consistency.json", "--keys", "keys.json"], 0,
                           "^OK: the tree of 80 leaves signed at 2026-06-10T10:00:00.000Z extends the tree of 50 leaves signed at 2026-05-20T10:00:00.000Z")  # fmt: skip
        self.assertVerdict(["export", "export.ndjson", "--keys", "keys.json"], 0,
                           "^OK: 4 rows of the audit_log export of %s: 3 leaves, each in the tree of 80 leaves .*; 1 rows have no event in the tree" % PROJECT)  # fmt: skip
        self.assertVerdict(["export", "export.ndjson", "--keys", "keys.json"], 0,
                           "by key %s; the manifest, signed at 2026-06-10T10:00:00.000Z by key %s, counts these 4 rows;" % (NEW.key_id, NEW.key_id))  # fmt: skip
        self.assertVerdict(["export", "export.ndjson", "--keys", "keys.json", "--checkpoint", "old.json", "--consistency", "consistency.json"], 0,
                           "consistent with the stored checkpoint of 50 leaves signed at 2026-05-20T10:00:00.000Z\n$")  # fmt: skip
        with open(self.path("export.ndjson"), encoding="utf-8") as file:
            self.assertVerdict(["export", "-", "--keys", "keys.json"], 0, "^OK: 4 rows", stdin=file.read())

    def test_each_command_refuses_with_the_reason(self):
        self.write("stranger.json", STRANGER.checkpoint(self.tree, 80))
        self.assertVerdict(["checkpoint", "stranger.json", "--keys", "keys.json"], 1, "^FAILED: checkpoint signed by unknown key %s" % STRANGER.key_id)
        self.write("other-leaf.json", fx.events(80)[34])
        self.assertVerdict(["inclusion", "other-leaf.json", "inclusion.json", "new.json", "--keys", "keys.json"], 1, "^FAILED: leaf 33 and its inclusion path give the root")
        self.write("shrunk.json", NEW.checkpoint(self.tree, 40, issued_at="2026-06-11T10:00:00.000Z"))
        self.assertVerdict(["consistency", "new.json", "shrunk.json", "consistency.json", "--keys", "keys.json"], 1,
                           "^FAILED: tree shrank from 80 to 40 leaves: the newest events were truncated")  # fmt: skip
        with open(self.path("export.ndjson"), encoding="utf-8") as file:
            lines = file.read().splitlines()
        with open(self.path("cut.ndjson"), "w", encoding="utf-8") as file:
            file.write("\n".join(lines[:1] + lines[2:]) + "\n")
        self.assertVerdict(["export", "cut.ndjson", "--keys", "keys.json"], 1, "^FAILED: the manifest lists leaf 33, but no line holds it: a line was deleted\n$")
        # The manifest rewritten to match, as the proof alone allowed: its signature no longer holds.
        manifest = json.loads(lines[-1])["manifest"]
        manifest.update(lines=3, leaves=[3, 79], proof=manifest["proof"] + [{"start": 33, "end": 34, "hash": self.tree.hashes[33].hex()}])
        with open(self.path("rewritten.ndjson"), "w", encoding="utf-8") as file:
            file.write("\n".join(lines[:1] + lines[2:-1] + [json.dumps({"manifest": manifest})]) + "\n")
        self.assertVerdict(["export", "rewritten.ndjson", "--keys", "keys.json"], 1, "^FAILED: the manifest's signature does not verify with key %s" % NEW.key_id)
        with open(self.path("broken.json"), "w", encoding="utf-8") as file:
            file.write("{")
        self.assertVerdict(["checkpoint", "broken.json", "--keys", "keys.json"], 1, "^FAILED: broken.json is not JSON")

    def test_usage_errors_exit_2(self):
        self.assertVerdict([], 2, "usage:")
        self.assertVerdict(["verify", "x"], 2, "invalid choice")
        self.assertVerdict(["checkpoint", "new.json"], 2, "--keys")
        self.assertVerdict(["inclusion", "leaf.json", "new.json", "--keys", "keys.json"], 2, "required")
        self.assertVerdict(["checkpoint", "missing.json", "--keys", "keys.json"], 2, "cannot read missing.json")
        self.assertVerdict(["export", "export.ndjson", "--keys", "keys.json", "--consistency", "consistency.json"], 2, "--consistency needs --checkpoint")


if __name__ == "__main__":
    unittest.main()
