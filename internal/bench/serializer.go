package bench

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// noSerializer lets a rest client fetch non-API paths such as /metrics.
type noSerializer struct{}

func (noSerializer) SupportedMediaTypes() []runtime.SerializerInfo {
	return scheme.Codecs.WithoutConversion().SupportedMediaTypes()
}
func (noSerializer) EncoderForVersion(e runtime.Encoder, _ runtime.GroupVersioner) runtime.Encoder {
	return e
}
func (noSerializer) DecoderToVersion(d runtime.Decoder, _ runtime.GroupVersioner) runtime.Decoder {
	return d
}
