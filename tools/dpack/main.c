/* main.c - dpack: convert datasets into the packed .dpk format, verify and inspect them. */
#include "common/log.h"
#include "tools/dpack/dpack.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
	"usage: dpack COMMAND [options] ...\n"
	"\n"
	"Convert a dataset into a packed, checksummed .dpk file with O(1) random access.\n"
	"\n"
	"commands:\n"
	"  pack SRC OUT.dpk              SRC: an ImageFolder tree (class = sorted sub-folder;\n"
	"                                JPEG, PNG, WebP, BMP, PGM/PPM, TIFF files),\n"
	"                                or a WebDataset .tar (KEY.jpg + KEY.cls members)\n"
	"  pack IMAGES.npy LABELS.npy OUT.dpk\n"
	"                                uint8 images N x ... and integer labels N (e.g. CIFAR)\n"
	"  pack --shard-size SIZE SRC... SET\n"
	"                                a set: manifest SET and .dpk shards beside it\n"
	"  append SET SHARD.dpk          add a shard to a set (made if missing), no repacking\n"
	"  verify D.dpk|SET              recompute every checksum; exit 1 listing bad samples\n"
	"  inspect D.dpk|SET [--json]    counts, classes, kinds, size histograms (and shards)\n"
	"  decode D.dpk INDEX            one sample's pixels as loaderd decodes them, to stdout\n"
	"  fetch s3://BUCKET/PREFIX/NAME make an s3:// dataset local in your cache\n"
	"\n"
	"Wherever a dataset goes (OUT, D.dpk, SET), s3://BUCKET/PREFIX/NAME names one in an\n"
	"S3-compatible store (docs/S3.md): pack uploads the shards under PREFIX and NAME last.\n"
	"\n"
	"Run 'dpack COMMAND --help' for the options of a command.\n";

int main(int argc, char **argv)
{
	log_prog = "dpack";
	if (argc < 2) {
		fputs(usage, stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		fputs(usage, stdout);
		return 0;
	}
	/* each through remote.c, which makes an s3:// operand local first (docs/S3.md) */
	if (!strcmp(cmd, "pack"))
		return dpack_remote_main(argc - 1, argv + 1, dpack_pack_main);
	if (!strcmp(cmd, "verify"))
		return dpack_remote_main(argc - 1, argv + 1, dpack_verify_main);
	if (!strcmp(cmd, "inspect"))
		return dpack_remote_main(argc - 1, argv + 1, dpack_inspect_main);
	if (!strcmp(cmd, "append"))
		return dpack_remote_main(argc - 1, argv + 1, dpack_append_main);
	if (!strcmp(cmd, "decode"))
		return dpack_remote_main(argc - 1, argv + 1, dpack_decode_main);
	if (!strcmp(cmd, "fetch"))
		return dpack_remote_main(argc - 1, argv + 1, NULL);
	LOG_ERROR("unknown command '%s' (pack, append, verify, inspect, decode, fetch; see dpack "
		  "--help)", cmd);
	return 2;
}
