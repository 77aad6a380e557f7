// A stand-in for the Tencent Cloud VPC SDK that flanneld links for its
// tencentvpc backend: the module proxy these tests build from does not serve
// it, and the tests use the host-gw backend. Every call fails.
module github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc

go 1.26.0
