# s3_lib.sh - a real S3 API server for the tests that take s3:// URLs (tests/it_s3*.sh): moto's
# server, pinned, in a venv under $BUILD (made once, kept), started once per test script on a free
# port with signatures checked. Source it after lib.sh. Functions only; nothing runs on load.
#
#   s3_start DIR        start moto (its log in DIR/moto.log), make the IAM user "owner" (every
#                       S3 and IAM action) and export its keys, AWS_ENDPOINT_URL and AWS_REGION;
#                       sets S3PID. Exit 77 (skip) only when the venv cannot be made because PyPI
#                       cannot be reached; any other failure is exit 1.
#   s3_user NAME POLICY print "KEY SECRET" of a new IAM user with inline policy POLICY (JSON).
#   s3_curl METHOD PATH [CURL-OPTION...]: one signed request to the store with the current keys
#                       (the answer on stdout; the HTTP status last, on a line of its own).
#   s3_put_file PATH FILE: PUT FILE as PATH; prints the HTTP status.
#   s3_stop             stop moto.
MOTO_VERSION=5.1.22
S3PID=""

s3_venv() {
	S3VENV=${BUILD:-build}/s3venv
	# made once, kept; made again when the pinned version changes
	[ -x "$S3VENV/bin/moto_server" ] && [ -f "$S3VENV/.moto-$MOTO_VERSION" ] && return 0
	_py=${LOADERD_PYTHON:-/usr/bin/python3}
	rm -rf "$S3VENV"
	if ! "$_py" -m venv "$S3VENV" >/dev/null 2>&1; then
		echo "# $_py -m venv failed (scripts/deps.sh installs python3-venv)"
		exit 1
	fi
	if ! "$S3VENV/bin/pip" install -q "moto[server]==$MOTO_VERSION" >"$S3VENV.log" 2>&1; then
		if ! "$S3VENV/bin/python" -c "
import urllib.request, sys
try: urllib.request.urlopen('https://pypi.org/simple/moto/', timeout=10)
except Exception: sys.exit(1)" 2>/dev/null; then
			rm -rf "$S3VENV"
			echo "skip: PyPI cannot be reached, so moto's S3 server cannot be installed"
			exit 77
		fi
		echo "# pip install moto[server]==$MOTO_VERSION failed:"
		show "$S3VENV.log"
		rm -rf "$S3VENV"
		exit 1
	fi
	touch "$S3VENV/.moto-$MOTO_VERSION"
}

# s3_iam ACTION ARGS...: one IAM query with the current credentials (unsigned keys count against
# INITIAL_NO_AUTH_ACTION_COUNT); the XML answer on stdout.
s3_iam() {
	_act=$1
	shift
	_data="Action=$_act&Version=2010-05-08"
	for _a in "$@"; do _data="$_data&$_a"; done
	curl -sS --fail-with-body --aws-sigv4 "aws:amz:us-east-1:iam" \
		--user "${AWS_ACCESS_KEY_ID:-AKIAIOSFODNN7EXAMPLE}:${AWS_SECRET_ACCESS_KEY:-x}" \
		-H "Content-Type: application/x-www-form-urlencoded" \
		--data "$_data" "$AWS_ENDPOINT_URL/"
}

s3_user() {
	_pol=$("$S3VENV/bin/python" -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$2")
	s3_iam CreateUser "UserName=$1" >/dev/null || return 1
	s3_iam PutUserPolicy "UserName=$1" "PolicyName=p" "PolicyDocument=$_pol" >/dev/null || return 1
	s3_iam CreateAccessKey "UserName=$1" | "$S3VENV/bin/python" -c '
import sys, xml.etree.ElementTree as E
t = E.fromstring(sys.stdin.read())
k = [e.text for e in t.iter() if e.tag.endswith("AccessKeyId")][0]
s = [e.text for e in t.iter() if e.tag.endswith("SecretAccessKey")][0]
print(k, s)'
}

s3_start() {
	s3_venv
	_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	INITIAL_NO_AUTH_ACTION_COUNT=3 "$S3VENV/bin/moto_server" -H 127.0.0.1 -p "$_port" \
		>"$1/moto.log" 2>&1 &
	S3PID=$!
	export AWS_ENDPOINT_URL="http://127.0.0.1:$_port" AWS_REGION=us-east-1
	unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
	_i=0
	until curl -s -o /dev/null "$AWS_ENDPOINT_URL/moto-api/"; do
		_i=$((_i + 1))
		if [ $_i -gt 100 ] || ! kill -0 "$S3PID" 2>/dev/null; then
			echo "# moto did not start:"
			show "$1/moto.log"
			exit 1
		fi
		sleep 0.1
	done
	# The three requests without a checked signature: the owner, its policy, its key.
	_keys=$(s3_user owner '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:*","iam:*"],"Resource":"*"}]}') ||
		{ echo "# cannot make moto's IAM user"; show "$1/moto.log"; exit 1; }
	export AWS_ACCESS_KEY_ID="${_keys% *}" AWS_SECRET_ACCESS_KEY="${_keys#* }"
}

s3_curl() {
	_m=$1 _p=$2
	shift 2
	if [ "$_m" = HEAD ]; then set -- -I "$@"; else set -- -X "$_m" "$@"; fi
	curl -sS --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" \
		--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
		-H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
		-w '\n%{http_code}\n' "$@" "$AWS_ENDPOINT_URL$_p"
}

# s3_put_file PATH FILE: PUT FILE's bytes as PATH (/bucket/key), signed.
s3_put_file() {
	curl -sS -o /dev/null -w '%{http_code}' -X PUT --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" \
		--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
		-H "x-amz-content-sha256: $(sha256sum "$2" | cut -d' ' -f1)" \
		-H "Content-Type: application/octet-stream" --data-binary "@$2" "$AWS_ENDPOINT_URL$1"
}

s3_stop() {
	stop_pid "$S3PID"
	S3PID=""
}
